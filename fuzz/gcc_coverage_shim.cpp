// GCC's -fsanitize-coverage=trace-cmp also instruments floating-point comparisons
// (__sanitizer_cov_trace_cmpf/cmpd), which libFuzzer 14 does not define; integer
// comparisons, which libFuzzer does use, are unaffected. Only linked in SLUICE_FUZZ builds.
extern "C" {
void __sanitizer_cov_trace_cmpf(float, float) {}
void __sanitizer_cov_trace_cmpd(double, double) {}
}
