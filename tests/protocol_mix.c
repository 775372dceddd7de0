/*
 * tests/protocol_mix.c — compiled only, never run (tests/cli_protocols.cmake): the two failure protocols
 * of cli/runtime.h are types, so a phase run under the other protocol's macro does not compile. Built
 * with -DMIX=0 it must compile (the control: the includes and the macros are right); with -DMIX=1 (an
 * mp_agreed phase under MP_PHASE_ALIKE: its message would be printed twice) or -DMIX=2 (an mp_alike phase
 * under MP_PHASE_AGREED: no agreement, a rank left waiting) it must not.
 */
#include "cli/runtime.h"

static mp_alike alike_phase(void) { return mp_alike_of(MP_OK); }
static mp_agreed agreed_phase(void) { return (mp_agreed){MP_OK}; }

/* A command's body: each phase under the macro of its kind, or (MIX) one under the other's. */
int protocol_mix(const mp_runtime *rt, const mp_err *err);
int protocol_mix(const mp_runtime *rt, const mp_err *err) {
    int status = 0;
#if MIX == 1
    MP_PHASE_ALIKE(status, done, rt, err, agreed_phase());
#elif MIX == 2
    MP_PHASE_AGREED(status, done, alike_phase());
#elif MIX == 3
    MP_PHASE_AGREED(status, done, MP_EINPUT);   /* a bare code is neither kind */
#else
    MP_PHASE_ALIKE(status, done, rt, err, alike_phase());
    MP_PHASE_AGREED(status, done, agreed_phase());
#endif
done:
    return status;
}
