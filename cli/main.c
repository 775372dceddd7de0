/*
 * cli/main.c — the meshpoint program: dispatches to a subcommand. The composition root: only cli/
 * decides exit statuses (0 ok, 1 failed operation/check, 2 bad usage/input).
 *
 * Names the command for the error prefix ("meshpoint train: error: ...", core/log.h) before
 * dispatching, and answers --version (`meshpoint --version`, or `meshpoint <cmd> --version`).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "ckpt/ckpt.h"
#include "cli/cli.h"
#include "core/backend.h"
#include "core/cuda_module.h"
#include "core/fault.h"
#include "core/log.h"

#ifndef MP_VERSION
#define MP_VERSION "unknown"
#endif
#ifndef MP_GIT_DESCRIBE
#define MP_GIT_DESCRIBE ""
#endif

/* The commands: one table drives the dispatch and the usage text's list. */
static const mp_subcommand commands[] = {
    {"train", mp_cmd_train, NULL, "train a Llama-style model (run under mpirun for a dp x tp mesh)"},
    {"eval", mp_cmd_eval, NULL, "mean loss of a model over a token file"},
    {"data", mp_cmd_data, NULL, "turn UTF-8 text files into token files (byte-level, or the model's own tokenizer)"},
    {"ckpt", mp_cmd_ckpt, NULL, "inspect checkpoints: ls, show, verify, diff (across meshes), repair-views"},
    {"reshard", mp_cmd_reshard, NULL, "convert a checkpoint offline to another tp x dp mesh (or consolidate it)"},
    {"init", mp_cmd_init, NULL, "write a step-0 checkpoint of the seeded initialisation for any mesh"},
    {"sample", mp_cmd_sample, NULL, "generate text (or token ids) from a checkpoint's model, on any mesh"},
    {"plot", mp_cmd_plot, NULL, "draw a run's loss, learning rate and gradient norm into a PNG"},
    {"export", mp_cmd_export, NULL, "write a checkpoint's model as a Hugging Face directory (config.json + safetensors)"},
    {"import", mp_cmd_import, NULL, "read a Hugging Face model (Llama, Mistral, Qwen2, Qwen3, Phi-3) into a checkpoint for any mesh"},
    {0}};

/* The program's usage text: what it is, the commands (from the table), where to read more. */
static void print_usage(FILE *out) {
    fputs("meshpoint — TP+FSDP training of Llama-style models with sharded, reshardable HDF5 checkpoints\n"
          "\n"
          "usage: meshpoint <command> [options]\n"
          "\n"
          "commands:\n", out);
    mp_subcommand_list(out, commands, 9);
    fputs("\n"
          "`meshpoint <command> --help` describes each command's options; `meshpoint --version` the version.\n"
          "Reference: docs/CLI.md (every command and flag); start with README.md.\n", out);
}

/* The devices this binary can train on here: the CPU always; CUDA when built in, with the GPUs CUDA
 * reports or its reason for none (so `--version` tells a user at once why `--device cuda` is refused).
 * The CUDA module is loaded only where a CUDA driver is (mp_cuda_devices): on a CPU node nothing of CUDA. */
static void print_devices(void) {
#ifdef MP_HAVE_CUDA
    char why[MP_ERR_MSG_MAX] = "";
    int n = mp_cuda_devices(why, sizeof why);
    if (n > 0) printf("devices: cpu, cuda (%d GPU%s)\n", n, n > 1 ? "s" : "");
    else if (n == 0) printf("devices: cpu; cuda built in, no GPU on this host\n");
    else printf("devices: cpu; cuda built in, no usable GPU: %s\n", why);
#else
    printf("devices: cpu; cuda not built in\n");
#endif
}

/* Prints the program version (CMake project version, `git describe` at configure time when known) and
 * the checkpoint format version it writes and reads, to stdout. */
static void print_version(void) {
    printf("meshpoint %s%s%s%s\n", MP_VERSION, *MP_GIT_DESCRIBE ? " (git " : "", MP_GIT_DESCRIBE,
           *MP_GIT_DESCRIBE ? ")" : "");
    printf("checkpoint format: %s v%d (v%d for model families other than Llama; reads v1..v%d)\n", CKPT_FORMAT_NAME,
           CKPT_FORMAT_VERSION, CKPT_FORMAT_VERSION_MAX, CKPT_FORMAT_VERSION_MAX);
    print_devices();
    mp_err e;
    if (mp_cpu_isa_check(&e)) printf("cpu kernels: %s (%s)\n", mp_cpu_isa(), e.msg);
    else printf("cpu kernels: %s%s\n", mp_cpu_isa(), getenv("MP_ISA") && *getenv("MP_ISA") ? " (MP_ISA)" : "");
    printf("blas: OpenBLAS, %s kernels\n", mp_cpu_blas_core());
}

/* 1 if --version appears among argv[0 .. argc) before a "--". */
static int asks_version(int argc, char **argv) {
    for (int i = 0; i < argc && strcmp(argv[i], "--"); i++)
        if (!strcmp(argv[i], "--version")) return 1;
    return 0;
}

/* Dispatches to the command named by argv[1] (the usage text without one, exit 2; with --help, exit 0),
 * after naming it for the error prefix and answering --version. */
int main(int argc, char **argv) {
    if (argc < 2 || !strcmp(argv[1], "--help") || !strcmp(argv[1], "-h") || !strcmp(argv[1], "help")) {
        print_usage(argc < 2 ? stderr : stdout);
        return mp_exit_status(argc < 2 ? MP_EINPUT : MP_OK);
    }
    const char *name = argv[1];
    if (!strcmp(name, "--version") || !strcmp(name, "version")) { print_version(); return mp_exit_status(MP_OK); }
    const mp_subcommand *cmd = mp_subcommand_lookup(commands, name, "command", print_usage);
    if (!cmd) return mp_exit_status(MP_EINPUT);
    mp_subcommand_enter("meshpoint", cmd);
    if (asks_version(argc - 2, argv + 2)) { print_version(); return mp_exit_status(MP_OK); }
    mp_err e;
    if (mp_fault_check(&e)) {   /* a misspelt fault would inject nothing and let its test pass */
        mp_log_fail("%s", e.msg);
        return mp_exit_status(e.code);
    }
    return cmd->run(argc - 2, argv + 2);
}
