#!/usr/bin/env bash
# scripts/demo.sh — the main demo from a fresh Debian machine: installs the packages (scripts/setup.sh),
# builds (scripts/build.sh build), then runs the demo's stages (scripts/demo_stages.sh), which check
# their own outcome and exit non-zero, naming the stage, when one fails.
#
# The stages: turn the `fortunes` package's English text into byte-level tokens; train a small Llama on
# 4 processes (tp 2 x dp 2, sequence parallel, FSDP), printing the falling loss, saving a checkpoint every
# DEMO_STEPS/4 steps and keeping the newest 2; stop halfway as a preempted job would, and resume from the
# newest checkpoint to finish. Then the cluster "shrinks": the newest checkpoint is resharded offline to
# 2 processes (the plan first), training goes on for 100 more steps on 2 processes from it, and the same
# 4-process checkpoint is also loaded straight onto 1 process (load-time resharding) to evaluate it; the
# demo ends by sampling text from the model trained on 2 processes and drawing the loss curves (PNG).
#
# Settings (environment):
#   DEMO_STEPS   training steps of the main run (default 1000: a few minutes on 2 cores; CI runs 200)
#   DEMO_RUN     the run directory (default runs/demo; the continuation goes to ${DEMO_RUN}_dp2). The demo
#                replaces these on every run, but only when an earlier demo made them: it refuses a
#                directory that lacks its marker file rather than delete someone else's files.
# Exit status: 0 every stage passed its checks; 1 a stage failed (named on stderr); 2 a bad setting.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup.sh
./scripts/build.sh build
MP_BIN=$PWD/build/meshpoint exec ./scripts/demo_stages.sh
