/*
 * secret_file — whether a file that holds a secret (the database password,
 * the HTTP token) is kept from other users, as ssh asks of a private key: no
 * group or other read permission, and no ACL entry granting read to a group
 * or to a user other than this process's effective user. A file refused here
 * is refused outright (exit 1): its secret may already be known.
 */
#ifndef OOPS_SECRET_FILE_H
#define OOPS_SECRET_FILE_H

#include <stddef.h>
#include <sys/stat.h>

/*
 * fd is the open file, st its fstat. 0 when only its owner (and this
 * process's user, through an ACL, as systemd grants a credential) may read
 * it; else -1 and why gets the reason and the fix, without the path, e.g.
 *   "readable by group staff (mode 0640); make it readable by its owner alone (chmod 600)"
 */
int secret_file_private(int fd, const struct stat *st, char *why, size_t whylen);

#endif
