// SM-id sampler for the hardware harness. The GPUColo paper (Chen et al., ICDCS 2024), Sec.
// IV-B, samples "the SM numbers ... in each training iteration using the smid function provided
// in the Nvidia PTX library"; this kernel does that, and also times each block.
//
// Loaded at run time by harness/hil/smid.py with cupy.RawModule (NVRTC); no build step.
// Launch it on the stream of the process whose SM footprint you want to see: each block reads
// the id of the SM it runs on (out[blockIdx.x]) and the device-wide nanosecond clock
// %globaltimer when it starts and when it is done (times[2 * blockIdx.x], times[2 * blockIdx.x
// + 1]). Two readings follow from one launch:
//
// * the distinct ids over the launch (the union): every SM the launch visited;
// * the most SMs holding one of its blocks at the same instant (the peak), from the intervals.
//
// They differ under MPS. An active-thread percentage caps how many SMs a client uses at a time,
// not which ones (the MPS documentation: the limit reserves nothing, and kernels of different
// clients may run on the same SM), so the blocks of one launch can visit more SMs than the cap
// over the launch's life: the union overstates the share, the peak does not. A green-context
// partition fixes the SMs themselves, so there the two agree.
//
// The blocks spin for `spin_cycles` clock cycles before exiting so that they stay resident long
// enough for the block scheduler to spread them over every SM it is allowed to use, and so that
// each block's interval spans several ticks of %globaltimer.
//
// Notes: %smid is a PTX special register; PTX documents that SM ids need not be contiguous, so
// the sampler also records %nsmid (an upper bound on %smid + 1) in nsmid_out[0]. On the GPUs we
// target (Ampere, Hopper) the ids run 0 .. multiProcessorCount - 1.

extern "C" __global__ void record_smid(unsigned int *out, unsigned int *nsmid_out, int n,
                                       long long spin_cycles, unsigned long long *times)
{
    if (threadIdx.x != 0) {
        return;
    }
    unsigned long long t_start;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t_start));
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
    unsigned long long t_end;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t_end));
    if ((int)blockIdx.x < n) {
        out[blockIdx.x] = smid;
        times[2 * blockIdx.x] = t_start;
        times[2 * blockIdx.x + 1] = t_end;
    }
}
