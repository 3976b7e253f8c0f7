/*
 * profile_fast.h — the fast profile's pocketsphinx arguments, in one place
 * for the backend (settings.c) and for the bare-library reference
 * (tools/bench/ps_bare.c --profile fast), so that a benchmark of the fast
 * profile measures hark against the library with the same settings.
 *
 * No second pass (-fwdflat) and no lattice rescoring (-bestpath), which
 * finals wait for, and narrower beams and per-frame caps on the first
 * pass: about half the CPU of the accurate profile on the LibriVox
 * recordings, a few words lost (bench/RESULTS.md). In a model each is
 * overridden by a parameter "fast:<argument>".
 */
#ifndef HARK_PS_PROFILE_FAST_H
#define HARK_PS_PROFILE_FAST_H

static const char *const ps_fast_profile_args[][2] = {
    {"-fwdflat", "no"},  {"-bestpath", "no"},   {"-beam", "1e-35"}, {"-pbeam", "1e-35"},
    {"-wbeam", "1e-25"}, {"-maxhmmpf", "3000"}, {"-maxwpf", "10"},
};
#define PS_FAST_PROFILE_ARGC (sizeof ps_fast_profile_args / sizeof ps_fast_profile_args[0])

#endif
