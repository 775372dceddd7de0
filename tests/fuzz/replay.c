/*
 * tests/fuzz/replay.c — a main() for the fuzz targets in builds without libFuzzer (gcc, the Release and
 * sanitizer passes of scripts/test.sh): feeds every file of the directories (or files) named on the
 * command line to LLVMFuzzerTestOneInput once, in name order, so the committed corpora, regression
 * inputs included, are checked by every build and not only by the clang fuzz build. A target aborts
 * on a finding; the exit status is then non-zero. Prints how many inputs ran.
 */
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* Runs the target on the file at path; returns 0, or -1 when it cannot be read. */
static int replay_file(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) { perror(path); return -1; }
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    uint8_t *buf = malloc(n > 0 ? (size_t)n : 1);
    size_t got = n > 0 ? fread(buf, 1, (size_t)n, f) : 0;
    fclose(f);
    if (n < 0 || got != (size_t)n) { fprintf(stderr, "%s: short read\n", path); free(buf); return -1; }
    LLVMFuzzerTestOneInput(buf, got);
    free(buf);
    return 0;
}

/* qsort comparator of directory entry names. */
static int cmp_name(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

int main(int argc, char **argv) {
    int ran = 0, bad = 0;
    for (int i = 1; i < argc; i++) {
        struct stat st;
        if (stat(argv[i], &st) != 0) { perror(argv[i]); bad++; continue; }
        if (!S_ISDIR(st.st_mode)) { bad += replay_file(argv[i]) != 0; ran++; continue; }
        DIR *d = opendir(argv[i]);
        if (!d) { perror(argv[i]); bad++; continue; }
        char **names = NULL;
        size_t nn = 0;
        for (struct dirent *e; (e = readdir(d));) {
            if (e->d_name[0] == '.') continue;
            names = realloc(names, (nn + 1) * sizeof *names);
            names[nn++] = strdup(e->d_name);
        }
        closedir(d);
        qsort(names, nn, sizeof *names, cmp_name);
        for (size_t k = 0; k < nn; k++) {
            char path[4096];
            snprintf(path, sizeof path, "%s/%s", argv[i], names[k]);
            bad += replay_file(path) != 0;
            ran++;
            free(names[k]);
        }
        free(names);
    }
    printf("replayed %d inputs%s\n", ran, bad ? " (some unreadable)" : "");
    return bad ? 1 : 0;
}
