// The parallel hash array of GPU point pair feature registration: an associative array built by
// sorting instead of hashing with atomics, shared by voxelization, voxel downsampling, PPF model
// description, vote counting and pose clustering. hash_array.cuh builds it on CUDA,
// hash_array_cpu.h on the CPU, with the same contract:
//
// Input: n keys, int64, each in [0, key_bound]. key_bound itself marks an invalid element (a
// point outside the grid, say): it sorts after every valid key and forms no entry. Bounding the
// keys lets the CUDA radix sort look at bit_width(key_bound) bits instead of 64.
//
// Output (sizes in brackets are the valid prefixes; CUDA tensors are allocated at capacity n,
// since the number of distinct keys is only known on the device):
//   sorted_keys  [n]           the keys in ascending order, invalid ones last
//   perm         [n]           perm[j] = index of the key at sorted position j. The sort is stable:
//                              equal keys keep their index order, so a run lists its elements by
//                              increasing index and perm[starts[r]] is the run's lowest index.
//   unique_keys  [num_unique]  the distinct valid keys, ascending
//   counts       [num_unique]  how many elements hold unique_keys[r]
//   starts       [num_unique]  sorted position of unique_keys[r]'s first element (exclusive scan
//                              of counts); its elements are perm[starts[r] .. starts[r]+counts[r])
//   num_unique                 the number of distinct valid keys (a device scalar on CUDA)
//
// A key is looked up by binary search in unique_keys (find_run below, on host and device):
// it returns the run index r, or -1 when the key is absent.
#pragma once

#include <cstdint>

#include "common/portable_math.h"

namespace pointops {
namespace hash_array {

// The first r in [0, count) with keys[r] >= key (count when there is none); keys ascending.
POINTOPS_HOST_DEVICE inline int64_t lower_bound(const int64_t* keys, int64_t count, int64_t key) {
  int64_t lo = 0;
  int64_t hi = count;
  while (lo < hi) {
    const int64_t mid = lo + (hi - lo) / 2;
    if (keys[mid] < key) {
      lo = mid + 1;
    } else {
      hi = mid;
    }
  }
  return lo;
}

// The run holding key among the first num_unique unique keys, or -1.
POINTOPS_HOST_DEVICE inline int64_t find_run(const int64_t* unique_keys, int64_t num_unique, int64_t key) {
  const int64_t r = lower_bound(unique_keys, num_unique, key);
  return r < num_unique && unique_keys[r] == key ? r : -1;
}

}  // namespace hash_array
}  // namespace pointops
