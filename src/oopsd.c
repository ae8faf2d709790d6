/* oopsd — placeholder main until the runtime lands: connect, migrate, exit. */
#include <stdio.h>
#include "db.h"
#include "schema.h"
int main(void)
{
    char err[512];
    db_config cfg;
    if (db_config_resolve(&cfg, NULL, err, sizeof err) != 0) {
        fprintf(stderr, "oopsd: %s\n", err);
        return 1;
    }
    db_conn *c = db_open(&cfg, err, sizeof err);
    db_config_free(&cfg);
    if (!c) {
        fprintf(stderr, "oopsd: %s\n", err);
        return 2;
    }
    if (schema_migrate(c, NULL, err, sizeof err)) {
        fprintf(stderr, "oopsd: %s\n", err);
        return 2;
    }
    db_close(c);
    return 0;
}
