/* db_url: password files (OOPS_DB_PASSWORD_FILE, the systemd credential
 * $CREDENTIALS_DIRECTORY/db-password) that a group or other users may read are
 * refused, as ssh refuses such a private key: exit 1 with a line naming the
 * file and its mode, never its content. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "db_url.h"

static char dir[] = "/tmp/oops-dburl.XXXXXX";
static char file[300], cred[300];

static void write_secret(const char *path, mode_t m)
{
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs("s3cret-pw\n", f);
    fclose(f);
    assert_int_equal(chmod(path, m), 0);
}

static int setup(void **state)
{
    (void)state;
    assert_non_null(mkdtemp(dir));
    snprintf(file, sizeof file, "%s/password", dir);
    snprintf(cred, sizeof cred, "%s/db-password", dir);
    unsetenv("OOPS_DB_PASSWORD");
    unsetenv("CREDENTIALS_DIRECTORY");
    unsetenv("OOPS_DB_PASSWORD_FILE");
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    unlink(file);
    unlink(cred);
    rmdir(dir);
    return 0;
}

static int resolve(db_config *cfg, char *err, size_t n)
{
    err[0] = '\0';
    return db_config_resolve(cfg, "mysql://oops@db.example/oops", err, n);
}

static void a_password_file_others_may_read_is_refused(void **state)
{
    (void)state;
    char err[1024], want[1024];
    db_config cfg;
    setenv("OOPS_DB_PASSWORD_FILE", file, 1);
    static const mode_t bad[] = {0644, 0640, 0604, 0440, 0444};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        write_secret(file, bad[i]);
        assert_int_equal(resolve(&cfg, err, sizeof err), -1);
        snprintf(want, sizeof want,
                 "refusing the database password file (OOPS_DB_PASSWORD_FILE) %s: it is readable "
                 "by ",
                 file);
        if (strncmp(err, want, strlen(want)) != 0)
            fail_msg("mode %04o: got \"%s\"", (unsigned)bad[i], err);
        char mode[32];
        snprintf(mode, sizeof mode, "(mode %04o)", (unsigned)bad[i]);
        assert_non_null(strstr(err, mode));
        assert_non_null(strstr(err, "chmod 600"));
        assert_null(strstr(err, "s3cret"));
        assert_null(strchr(err, '\n'));
    }
    static const mode_t good[] = {0600, 0400};
    for (size_t i = 0; i < sizeof good / sizeof *good; i++) {
        write_secret(file, good[i]);
        assert_int_equal(resolve(&cfg, err, sizeof err), 0);
        assert_string_equal(cfg.password, "s3cret-pw");
        db_config_free(&cfg);
    }
    unsetenv("OOPS_DB_PASSWORD_FILE");
}

static void a_credential_others_may_read_is_refused(void **state)
{
    (void)state;
    char err[1024], want[1024];
    db_config cfg;
    setenv("CREDENTIALS_DIRECTORY", dir, 1);
    write_secret(cred, 0644);
    assert_int_equal(resolve(&cfg, err, sizeof err), -1);
    snprintf(want, sizeof want,
             "refusing the database password credential %s: it is readable by every user (mode "
             "0644); make it readable by its owner alone (chmod 600)",
             cred);
    assert_string_equal(err, want);
    /* No fallback to the next source: the credential is there. */
    write_secret(file, 0600);
    setenv("OOPS_DB_PASSWORD_FILE", file, 1);
    assert_int_equal(resolve(&cfg, err, sizeof err), -1);
    assert_int_equal(chmod(cred, 0400), 0);
    assert_int_equal(resolve(&cfg, err, sizeof err), 0);
    assert_string_equal(cfg.password, "s3cret-pw");
    db_config_free(&cfg);
    unsetenv("CREDENTIALS_DIRECTORY");
    unsetenv("OOPS_DB_PASSWORD_FILE");
}

int main(void)
{
    umask(022);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(a_password_file_others_may_read_is_refused),
        cmocka_unit_test(a_credential_others_may_read_is_refused),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
