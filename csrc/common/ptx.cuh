// Inline PTX for exchanging data between blocks, where CUDA C++ has no intrinsic:
//   * relaxed gpu-scope 64-bit loads and stores on global memory, for blocks of a cooperative
//     launch that publish words tagged with a round number and poll for them;
//   * thread-block clusters (sm_90): a block's shared memory as its cluster peers address it,
//     asynchronous stores into a peer's shared memory (st.async) that count their bytes down the
//     peer's transaction barrier (mbarrier), and waits on such a barrier. A block can then learn
//     that its peers' data has arrived from its own barrier alone, with no cluster-wide barrier.
// Every wrapper carries a "memory" clobber, so the compiler keeps it in order with the
// surrounding loads and stores.
#pragma once

#include <cstdint>

namespace pointops {
namespace cuda {

// Relaxed gpu-scope 64-bit accesses: each is single-copy atomic, so a word that carries its own
// round number next to its payload can be published and polled with no fence (the reader checks
// the round number of every word it uses).
__device__ __forceinline__ unsigned long long load_relaxed(const unsigned long long* p) {
  unsigned long long v;
  asm volatile("ld.relaxed.gpu.global.u64 %0, [%1];" : "=l"(v) : "l"(p) : "memory");
  return v;
}

__device__ __forceinline__ void store_relaxed(unsigned long long* p, unsigned long long v) {
  asm volatile("st.relaxed.gpu.global.u64 [%0], %1;" ::"l"(p), "l"(v) : "memory");
}

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
// The 32-bit shared-window address of a shared variable of this block.
__device__ __forceinline__ uint32_t shared_address(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// The address of the same shared variable in the cluster block `rank`.
__device__ __forceinline__ uint32_t peer_address(uint32_t local, uint32_t rank) {
  uint32_t remote;
  asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(remote) : "r"(local), "r"(rank));
  return remote;
}

// Stores v at a peer's shared `address` (peer_address) and counts its bytes down the peer's
// transaction barrier at `barrier` (peer_address of the barrier).
__device__ __forceinline__ void push_to_peer(uint32_t address, uint4 v, uint32_t barrier) {
  asm volatile(
      "st.async.shared::cluster.mbarrier::complete_tx::bytes.v4.b32 [%0], {%1, %2, %3, %4}, [%5];" ::"r"(address),
      "r"(v.x), "r"(v.y), "r"(v.z), "r"(v.w), "r"(barrier)
      : "memory");
}

__device__ __forceinline__ void push_to_peer(uint32_t address, uint32_t v, uint32_t barrier) {
  asm volatile("st.async.shared::cluster.mbarrier::complete_tx::bytes.b32 [%0], %1, [%2];" ::"r"(address), "r"(v),
               "r"(barrier)
               : "memory");
}

// A transaction barrier that completes a phase on one arrival plus the bytes it announces.
__device__ __forceinline__ void init_barrier(uint32_t barrier) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" ::"r"(barrier) : "memory");
}

// Makes this block's initialized barriers visible to its cluster peers (then sync the cluster
// before any peer pushes).
__device__ __forceinline__ void fence_barrier_init() {
  asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
}

// This block's one arrival of the phase, announcing the bytes the peers will push in it.
__device__ __forceinline__ void expect_bytes(uint32_t barrier, uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.release.cta.shared::cta.b64 _, [%0], %1;" ::"r"(barrier), "r"(bytes)
               : "memory");
}

// Spins until the barrier's phase of parity `phase_parity` has completed; the pushed bytes are
// visible after it (acquire at cluster scope).
__device__ __forceinline__ void wait_phase(uint32_t barrier, uint32_t phase_parity) {
  uint32_t done;
  do {
    asm volatile(
        "{\n .reg .pred p;\n"
        " mbarrier.try_wait.parity.acquire.cluster.shared::cta.b64 p, [%1], %2;\n"
        " selp.u32 %0, 1, 0, p;\n}"
        : "=r"(done)
        : "r"(barrier), "r"(phase_parity)
        : "memory");
  } while (done == 0);
}
#endif

}  // namespace cuda
}  // namespace pointops
