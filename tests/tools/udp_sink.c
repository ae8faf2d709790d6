/* udp_sink: a name server that never answers, for tests of slow lookups.
 *
 *   udp_sink ADDR PORT RECORD
 *
 * Binds a UDP socket to ADDR:PORT (an IPv4 address), then takes every
 * datagram and answers none, so a resolver pointed at it waits for its own
 * timeout. Each datagram appends one line ("query N BYTES") to RECORD,
 * flushed at once, so a test can see that a lookup is under way. Prints
 * "listening on ADDR:PORT" on stdout once bound; runs until killed.
 */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

int main(int argc, char **argv)
{
    if (argc != 4) {
        fprintf(stderr, "usage: udp_sink ADDR PORT RECORD\n");
        return 2;
    }
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)atoi(argv[2]))};
    if (inet_pton(AF_INET, argv[1], &sa.sin_addr) != 1) {
        fprintf(stderr, "udp_sink: %s: not an IPv4 address\n", argv[1]);
        return 2;
    }
    int fd = socket(AF_INET, SOCK_DGRAM, 0);
    if (fd < 0 || bind(fd, (struct sockaddr *)&sa, sizeof sa) != 0) {
        perror("udp_sink: bind");
        return 1;
    }
    FILE *rec = fopen(argv[3], "a");
    if (!rec) {
        perror(argv[3]);
        return 1;
    }
    printf("listening on %s:%s\n", argv[1], argv[2]);
    fflush(stdout);
    char buf[4096];
    for (unsigned long n = 1;; n++) {
        ssize_t len = recv(fd, buf, sizeof buf, 0);
        if (len < 0)
            continue;
        fprintf(rec, "query %lu %zd\n", n, len);
        fflush(rec);
    }
}
