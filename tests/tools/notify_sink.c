/* notify_sink: stands in for systemd's notify socket in tests.
 *
 *   notify_sink SOCKET_PATH RECORD_FILE
 *
 * Binds a unix datagram socket at SOCKET_PATH (removed first when it exists;
 * a path starting with '@' is in the abstract namespace, as in NOTIFY_SOCKET)
 * and appends every datagram it receives to RECORD_FILE as one line, the
 * datagram's own newlines written as tabs ("RELOADING=1\tMONOTONIC_USEC=..."),
 * other control characters as '?'. Each line is written with one write(2)
 * on an O_APPEND descriptor, so a test can read the file while the sink runs.
 * Prints "listening on SOCKET_PATH" on stdout once bound; exits 0 on SIGTERM
 * or SIGINT (removing the socket file).
 */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

static volatile sig_atomic_t stop;

static void on_signal(int sig)
{
    (void)sig;
    stop = 1;
}

int main(int argc, char **argv)
{
    if (argc != 3) {
        fprintf(stderr, "usage: notify_sink SOCKET_PATH RECORD_FILE\n");
        return 1;
    }
    const char *path = argv[1];
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    size_t plen = strlen(path);
    if (plen == 0 || plen >= sizeof sa.sun_path) {
        fprintf(stderr, "notify_sink: socket path must be 1 to %zu bytes\n",
                sizeof sa.sun_path - 1);
        return 1;
    }
    memcpy(sa.sun_path, path, plen);
    bool abstract = path[0] == '@';
    if (abstract)
        sa.sun_path[0] = '\0';
    else
        unlink(path);
    int fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    socklen_t salen = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + plen + !abstract);
    if (fd < 0 || bind(fd, (struct sockaddr *)&sa, salen) != 0) {
        fprintf(stderr, "notify_sink: cannot bind %s: %s\n", path, strerror(errno));
        return 1;
    }
    int out = open(argv[2], O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    if (out < 0) {
        fprintf(stderr, "notify_sink: cannot open %s: %s\n", argv[2], strerror(errno));
        return 1;
    }
    struct sigaction act = {.sa_handler = on_signal}; /* no SA_RESTART: recv returns EINTR */
    sigaction(SIGTERM, &act, NULL);
    sigaction(SIGINT, &act, NULL);
    printf("listening on %s\n", path);
    fflush(stdout);
    static char msg[65536 + 1];
    while (!stop) {
        ssize_t n = recv(fd, msg, sizeof msg - 1, 0);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            fprintf(stderr, "notify_sink: recv: %s\n", strerror(errno));
            return 1;
        }
        while (n > 0 && msg[n - 1] == '\n') /* a trailing newline ends the line anyway */
            n--;
        for (ssize_t i = 0; i < n; i++) {
            unsigned char c = (unsigned char)msg[i];
            if (c == '\n')
                msg[i] = '\t';
            else if (c < 0x20 || c == 0x7f)
                msg[i] = '?';
        }
        msg[n++] = '\n';
        if (write(out, msg, (size_t)n) != n) {
            fprintf(stderr, "notify_sink: writing %s: %s\n", argv[2], strerror(errno));
            return 1;
        }
    }
    if (!abstract)
        unlink(path);
    return 0;
}
