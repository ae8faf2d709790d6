/* privs: --run-as USER resolved at start (unknown, root and oopsd's own user
 * refused with one line), the capabilities it needs, and the ambient and
 * inheritable sets cleared so no child keeps a capability through exec. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <linux/capability.h>
#include <pwd.h>
#include <stdio.h>
#include <string.h>
#include <stdbool.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "privs.h"

static void a_user_is_resolved_or_refused(void **state)
{
    (void)state;
    privs_user u;
    char err[512];
    assert_int_equal(privs_resolve("no-such-user-22", &u, err, sizeof err), -1);
    assert_string_equal(err, "--run-as no-such-user-22: no such user");
    assert_int_equal(privs_resolve("", &u, err, sizeof err), -1);
    assert_int_equal(privs_resolve("root", &u, err, sizeof err), -1);
    assert_string_equal(err, "--run-as root: must be an unprivileged user, not uid 0");
    struct passwd *me = getpwuid(geteuid());
    if (me && geteuid() != 0) {
        assert_int_equal(privs_resolve(me->pw_name, &u, err, sizeof err), -1);
        assert_non_null(strstr(err, "that is the user oopsd runs as"));
    }
    struct passwd *nobody = getpwnam("nobody");
    if (!nobody || nobody->pw_uid == geteuid())
        skip();
    assert_int_equal(privs_resolve("nobody", &u, err, sizeof err), 0);
    assert_int_equal(u.uid, nobody->pw_uid);
    assert_int_equal(u.gid, nobody->pw_gid);
    assert_string_equal(u.name, "nobody");
    assert_string_equal(u.home, nobody->pw_dir);
}

static void the_capabilities_it_needs(void **state)
{
    (void)state;
    char missing[64];
    privs_missing_caps(missing, sizeof missing);
    bool all = true;
    int caps[] = {CAP_SETUID, CAP_SETGID, CAP_KILL};
    for (int i = 0; i < 3; i++)
        all = all && prctl(PR_CAPBSET_READ, caps[i], 0, 0, 0) == 1;
    if (geteuid() == 0 && all) /* root in the CI: everything in its effective set */
        assert_string_equal(missing, "");
    char tiny[12];
    privs_missing_caps(tiny, sizeof tiny); /* never overflows */
    assert_true(strlen(tiny) < sizeof tiny);
}

static void ambient_and_inheritable_are_cleared(void **state)
{
    (void)state;
    char err[256];
    if (geteuid() == 0) { /* give ourselves one of each, then clear them */
        struct __user_cap_header_struct h = {_LINUX_CAPABILITY_VERSION_3, 0};
        struct __user_cap_data_struct d[2];
        assert_int_equal(syscall(SYS_capget, &h, d), 0);
        d[0].inheritable |= 1u << CAP_KILL;
        assert_int_equal(syscall(SYS_capset, &h, d), 0);
        assert_int_equal(prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_RAISE, CAP_KILL, 0, 0), 0);
        assert_int_equal(prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_IS_SET, CAP_KILL, 0, 0), 1);
    }
    assert_int_equal(privs_clear_inheritable(err, sizeof err), 0);
    assert_int_equal(prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_IS_SET, CAP_KILL, 0, 0), 0);
    struct __user_cap_header_struct h = {_LINUX_CAPABILITY_VERSION_3, 0};
    struct __user_cap_data_struct d[2];
    assert_int_equal(syscall(SYS_capget, &h, d), 0);
    assert_int_equal(d[0].inheritable | d[1].inheritable, 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(a_user_is_resolved_or_refused),
        cmocka_unit_test(the_capabilities_it_needs),
        cmocka_unit_test(ambient_and_inheritable_are_cleared),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
