#include "secret_file.h"

#include <endian.h>
#include <errno.h>
#include <grp.h>
#include <pwd.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/xattr.h>
#include <unistd.h>

/* The POSIX ACL as Linux stores it (system.posix_acl_access, little-endian):
 * a 4-byte version (2), then entries {tag u16, perm u16, id u32}. */
#define ACL_XATTR "system.posix_acl_access"
#define ACL_VERSION 2
#define TAG_USER_OBJ 0x01
#define TAG_USER 0x02
#define TAG_GROUP_OBJ 0x04
#define TAG_GROUP 0x08
#define TAG_MASK 0x10
#define TAG_OTHER 0x20
#define PERM_READ 4
#define ACL_MAX_ENTRIES 64

#define FIX "make it readable by its owner alone (chmod 600)"

typedef struct acl_entry {
    unsigned tag, perm;
    uint32_t id;
} acl_entry;

static const char *group_name(gid_t gid, char *buf, size_t n)
{
    struct group *g = getgrgid(gid);
    if (g)
        snprintf(buf, n, "%.64s", g->gr_name);
    else
        snprintf(buf, n, "%u", (unsigned)gid);
    return buf;
}

static const char *user_name(uid_t uid, char *buf, size_t n)
{
    struct passwd *p = getpwuid(uid);
    if (p)
        snprintf(buf, n, "%.64s", p->pw_name);
    else
        snprintf(buf, n, "%u", (unsigned)uid);
    return buf;
}

/* The file's access ACL: the number of entries, 0 without one, -1 when it
 * cannot be read or understood. */
static int read_acl(int fd, acl_entry *out, int max)
{
    unsigned char raw[4 + 8 * ACL_MAX_ENTRIES];
    ssize_t n = fgetxattr(fd, ACL_XATTR, raw, sizeof raw);
    if (n < 0)
        return errno == ENODATA || errno == ENOTSUP ? 0 : -1;
    uint32_t version;
    memcpy(&version, raw, 4);
    if (n < 4 || (n - 4) % 8 != 0 || le32toh(version) != ACL_VERSION)
        return -1;
    int count = (int)((n - 4) / 8);
    for (int i = 0; i < count && i < max; i++) {
        uint16_t tag, perm;
        uint32_t id;
        memcpy(&tag, raw + 4 + 8 * i, 2);
        memcpy(&perm, raw + 6 + 8 * i, 2);
        memcpy(&id, raw + 8 + 8 * i, 4);
        out[i] = (acl_entry){le16toh(tag), le16toh(perm), le32toh(id)};
    }
    return count;
}

/* With an ACL the mode's group bits are its mask: who may read is in the entries. */
static int check_acl(const acl_entry *e, int n, const struct stat *st, char *why, size_t whylen)
{
    unsigned mask = 7;
    for (int i = 0; i < n; i++)
        if (e[i].tag == TAG_MASK)
            mask = e[i].perm;
    char name[80];
    unsigned mode = (unsigned)st->st_mode & 07777;
    for (int i = 0; i < n; i++) {
        unsigned eff = e[i].tag == TAG_OTHER ? e[i].perm : e[i].perm & mask;
        if (!(eff & PERM_READ))
            continue;
        if (e[i].tag == TAG_OTHER)
            snprintf(why, whylen, "readable by every user (mode %04o); " FIX, mode);
        else if (e[i].tag == TAG_GROUP_OBJ)
            snprintf(why, whylen, "readable by group %s (its ACL); " FIX " and drop the ACL",
                     group_name(st->st_gid, name, sizeof name));
        else if (e[i].tag == TAG_GROUP)
            snprintf(why, whylen, "readable by group %s (its ACL); drop that ACL entry",
                     group_name((gid_t)e[i].id, name, sizeof name));
        else if (e[i].tag == TAG_USER && e[i].id != (uint32_t)geteuid())
            snprintf(why, whylen, "readable by user %s (its ACL); drop that ACL entry",
                     user_name((uid_t)e[i].id, name, sizeof name));
        else
            continue;
        return -1;
    }
    return 0;
}

int secret_file_private(int fd, const struct stat *st, char *why, size_t whylen)
{
    acl_entry e[ACL_MAX_ENTRIES];
    int n = read_acl(fd, e, ACL_MAX_ENTRIES);
    if (n < 0 || n > ACL_MAX_ENTRIES) {
        snprintf(why, whylen, "its ACL cannot be read; " FIX " and drop the ACL");
        return -1;
    }
    if (n > 0)
        return check_acl(e, n, st, why, whylen);
    unsigned mode = (unsigned)st->st_mode & 07777;
    char name[80];
    if (st->st_mode & S_IROTH)
        snprintf(why, whylen, "readable by every user (mode %04o); " FIX, mode);
    else if (st->st_mode & S_IRGRP)
        snprintf(why, whylen, "readable by group %s (mode %04o); " FIX,
                 group_name(st->st_gid, name, sizeof name), mode);
    else
        return 0;
    return -1;
}
