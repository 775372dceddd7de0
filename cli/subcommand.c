/*
 * cli/subcommand.c — the subcommand tables (cli/cli.h): finding a name, naming the running command for
 * the error prefix, and printing a table as the usage text's command list, so that one table per level
 * (`meshpoint <command>`, `meshpoint ckpt <sub>`) drives both the dispatch and the help.
 */
#include <stdio.h>
#include <string.h>
#include "cli/cli.h"
#include "core/log.h"

const mp_subcommand *mp_subcommand_lookup(const mp_subcommand *table, const char *name, const char *what,
                                          void (*usage)(FILE *out)) {
    for (const mp_subcommand *c = table; c->name; c++)
        if (!strcmp(c->name, name)) return c;
    mp_log_fail("unknown %s \"%s\"", what, name);
    fputc('\n', stderr);
    usage(stderr);
    return NULL;
}

void mp_subcommand_enter(const char *prefix, const mp_subcommand *cmd) {
    char prog[64];
    snprintf(prog, sizeof prog, "%s %s", prefix, cmd->name);
    mp_log_set_prog(prog);
}

void mp_subcommand_names(FILE *out, const mp_subcommand *table) {
    for (const mp_subcommand *c = table; c->name; c++) fprintf(out, "%s%s", c == table ? "" : "|", c->name);
}

/* Prints text, its lines after the first indented by indent spaces. */
static void put_continued(FILE *out, const char *text, int indent) {
    for (const char *nl; (nl = strchr(text, '\n')); text = nl + 1)
        fprintf(out, "%.*s\n%*s", (int)(nl - text), text, indent, "");
    fprintf(out, "%s\n", text);
}

void mp_subcommand_list(FILE *out, const mp_subcommand *table, int width) {
    for (const mp_subcommand *c = table; c->name; c++) {
        const char *syn = c->synopsis ? c->synopsis : c->name;
        if ((int)strlen(syn) >= width) fprintf(out, "  %s\n%*s", syn, 2 + width, "");
        else fprintf(out, "  %-*s", width, syn);
        put_continued(out, c->help, 2 + width);
    }
}
