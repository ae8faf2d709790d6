/* secret_file: a file holding a secret is refused when a group or other users
 * may read it, by its mode or by its ACL (as systemd grants a credential to
 * the service's user: that one entry is fine). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <endian.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/xattr.h>
#include <unistd.h>

#include "secret_file.h"

static char dir[] = "/tmp/oops-secret.XXXXXX";
static char path[300];

/* secret_file_private on path with mode m; why into why. */
static int check_mode(mode_t m, char *why, size_t n)
{
    assert_int_equal(chmod(path, m), 0);
    int fd = open(path, O_RDONLY);
    assert_true(fd >= 0);
    struct stat st;
    assert_int_equal(fstat(fd, &st), 0);
    why[0] = '\0';
    int rc = secret_file_private(fd, &st, why, n);
    close(fd);
    return rc;
}

static int setup(void **state)
{
    (void)state;
    assert_non_null(mkdtemp(dir));
    snprintf(path, sizeof path, "%s/secret", dir);
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs("s3cret\n", f);
    fclose(f);
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    unlink(path);
    rmdir(dir);
    return 0;
}

static void the_mode_decides_without_an_acl(void **state)
{
    (void)state;
    char why[300];
    static const mode_t ok[] = {0600, 0400, 0200, 0700, 0000, 0620, 0602, 0711};
    for (size_t i = 0; i < sizeof ok / sizeof *ok; i++)
        if (check_mode(ok[i], why, sizeof why) != 0)
            fail_msg("mode %04o refused: %s", (unsigned)ok[i], why);
    assert_int_equal(check_mode(0644, why, sizeof why), -1);
    assert_string_equal(why, "readable by every user (mode 0644); make it readable by its owner "
                             "alone (chmod 600)");
    assert_int_equal(check_mode(0604, why, sizeof why), -1);
    assert_non_null(strstr(why, "readable by every user (mode 0604)"));
    assert_int_equal(check_mode(0640, why, sizeof why), -1);
    assert_non_null(strstr(why, "readable by group "));
    assert_non_null(strstr(why, "(mode 0640); make it readable by its owner alone (chmod 600)"));
    assert_int_equal(check_mode(0440, why, sizeof why), -1);
    assert_int_equal(check_mode(0444, why, sizeof why), -1);
    assert_null(strstr(why, "s3cret"));
}

/* An access ACL as Linux stores it: version 2, then {tag, perm, id} entries. */
static int set_acl(const uint16_t (*e)[2], const uint32_t *ids, int n)
{
    unsigned char raw[4 + 8 * 16];
    uint32_t v = htole32(2);
    memcpy(raw, &v, 4);
    for (int i = 0; i < n; i++) {
        uint16_t tag = htole16(e[i][0]), perm = htole16(e[i][1]);
        uint32_t id = htole32(ids[i]);
        memcpy(raw + 4 + 8 * i, &tag, 2);
        memcpy(raw + 6 + 8 * i, &perm, 2);
        memcpy(raw + 8 + 8 * i, &id, 4);
    }
    return setxattr(path, "system.posix_acl_access", raw, (size_t)(4 + 8 * n), 0);
}

static void an_acl_decides_when_there_is_one(void **state)
{
    (void)state;
    char why[300];
    assert_int_equal(chmod(path, 0400), 0);
    /* What systemd writes for a credential: 0400 owned by root, plus
     * user:SERVICE:r and a mask r — the mode then shows 0440. */
    const uint16_t mine[][2] = {{0x01, 4}, {0x02, 4}, {0x04, 0}, {0x10, 4}, {0x20, 0}};
    const uint32_t my_ids[] = {0xffffffff, (uint32_t)geteuid(), 0xffffffff, 0xffffffff, 0xffffffff};
    if (set_acl(mine, my_ids, 5) != 0) {
        if (errno == ENOTSUP || errno == EOPNOTSUPP)
            skip(); /* this file system keeps no ACL */
        fail_msg("setxattr: %s", strerror(errno));
    }
    struct stat st;
    assert_int_equal(stat(path, &st), 0);
    assert_int_equal(st.st_mode & 0777, 0440); /* the mask in the group bits */
    int fd = open(path, O_RDONLY);
    assert_int_equal(secret_file_private(fd, &st, why, sizeof why), 0);
    close(fd);

    /* Another user named in it may read: refused. */
    const uint32_t other_ids[] = {0xffffffff, 4242, 0xffffffff, 0xffffffff, 0xffffffff};
    assert_int_equal(set_acl(mine, other_ids, 5), 0);
    fd = open(path, O_RDONLY);
    assert_int_equal(secret_file_private(fd, &st, why, sizeof why), -1);
    close(fd);
    assert_string_equal(why, "readable by user 4242 (its ACL); drop that ACL entry");

    /* A named group, the owning group through the mask, every user. */
    const uint16_t group[][2] = {{0x01, 6}, {0x04, 0}, {0x08, 4}, {0x10, 4}, {0x20, 0}};
    const uint32_t group_ids[] = {0xffffffff, 0xffffffff, 4343, 0xffffffff, 0xffffffff};
    assert_int_equal(set_acl(group, group_ids, 5), 0);
    fd = open(path, O_RDONLY);
    assert_int_equal(secret_file_private(fd, &st, why, sizeof why), -1);
    close(fd);
    assert_string_equal(why, "readable by group 4343 (its ACL); drop that ACL entry");
    /* ... unless the mask takes read away. */
    const uint16_t masked[][2] = {{0x01, 6}, {0x04, 4}, {0x08, 4}, {0x10, 0}, {0x20, 0}};
    assert_int_equal(set_acl(masked, group_ids, 5), 0);
    fd = open(path, O_RDONLY);
    assert_int_equal(fstat(fd, &st), 0);
    assert_int_equal(secret_file_private(fd, &st, why, sizeof why), 0);
    close(fd);
    const uint16_t owning[][2] = {{0x01, 6}, {0x04, 4}, {0x08, 0}, {0x10, 4}, {0x20, 0}};
    assert_int_equal(set_acl(owning, group_ids, 5), 0);
    fd = open(path, O_RDONLY);
    assert_int_equal(fstat(fd, &st), 0);
    assert_int_equal(secret_file_private(fd, &st, why, sizeof why), -1);
    close(fd);
    assert_non_null(strstr(why, "(its ACL); make it readable by its owner alone"));
    const uint16_t everyone[][2] = {{0x01, 6}, {0x04, 0}, {0x08, 0}, {0x10, 0}, {0x20, 4}};
    assert_int_equal(set_acl(everyone, group_ids, 5), 0);
    fd = open(path, O_RDONLY);
    assert_int_equal(fstat(fd, &st), 0);
    assert_int_equal(secret_file_private(fd, &st, why, sizeof why), -1);
    close(fd);
    assert_non_null(strstr(why, "readable by every user"));
    removexattr(path, "system.posix_acl_access");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(the_mode_decides_without_an_acl),
        cmocka_unit_test(an_acl_decides_when_there_is_one),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
