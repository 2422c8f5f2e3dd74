// SM-id sampler for the hardware harness (seed 000 §IV-B: "the SM numbers are sampled in each
// training iteration using the smid function provided in the Nvidia PTX library").
//
// Loaded at run time by harness/gpu/smid.py with cupy.RawModule (NVRTC); no build step.
// Launch it on the stream of the process whose SM footprint you want to see: each block reads
// the id of the SM it runs on and writes it to out[blockIdx.x]. Counting the distinct ids over
// one launch estimates how many SMs the context could occupy at that moment (under MPS the
// active-thread percentage caps it; a co-running inference kernel crowds it).
//
// The blocks spin for `spin_cycles` clock cycles before exiting so that they stay resident long
// enough for the block scheduler to spread them over every SM it is allowed to use, instead of
// letting a few fast SMs drain the whole grid.
//
// Notes: %smid is a PTX special register; PTX documents that SM ids need not be contiguous, so
// the sampler also records %nsmid (an upper bound on %smid + 1) in nsmid_out[0]. On the GPUs we
// target (Ampere, Hopper) the ids run 0 .. multiProcessorCount - 1.

extern "C" __global__ void record_smid(unsigned int *out, unsigned int *nsmid_out, int n,
                                       long long spin_cycles)
{
    if (threadIdx.x != 0) {
        return;
    }
    unsigned int smid;
    asm volatile("mov.u32 %0, %%smid;" : "=r"(smid));
    if (blockIdx.x == 0) {
        unsigned int nsmid;
        asm volatile("mov.u32 %0, %%nsmid;" : "=r"(nsmid));
        nsmid_out[0] = nsmid;
    }
    if (spin_cycles > 0) {
        long long start = clock64();
        while (clock64() - start < spin_cycles) {
            // busy wait: keep this block resident on its SM
        }
    }
    if ((int)blockIdx.x < n) {
        out[blockIdx.x] = smid;
    }
}
