// GPU self-test shared by every binary (--selftest).
#ifndef NINFER_SELFTEST_H
#define NINFER_SELFTEST_H

namespace ninfer {

// Runs the sample kernels on device 0, compares with a CPU reference and
// prints one "selftest: ok ..." line on stdout. Returns the exit code.
int run_selftest();

}  // namespace ninfer

#endif  // NINFER_SELFTEST_H
