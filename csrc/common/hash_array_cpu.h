// The parallel hash array on the CPU: the twin of hash_array.cuh, contract in hash_array.h
// (look keys up with hash_array::find_run on unique_keys). One call builds it for one batch of
// keys on the calling thread; kernels that are parallel over clouds build one per cloud.
#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

#include "common/hash_array.h"

namespace pointops {

struct HashArrayCpu {
  std::vector<int64_t> sorted_keys;  // (n,)
  std::vector<int64_t> perm;         // (n,)
  std::vector<int64_t> unique_keys;  // (num_unique,)
  std::vector<int64_t> counts;       // (num_unique,)
  std::vector<int64_t> starts;       // (num_unique,)

  int64_t num_unique() const { return static_cast<int64_t>(unique_keys.size()); }
};

// keys: n values in [0, key_bound]; key_bound marks an invalid element.
inline HashArrayCpu build_hash_array_cpu(const int64_t* keys, int64_t n, int64_t key_bound) {
  HashArrayCpu h;
  h.sorted_keys.assign(keys, keys + n);
  h.perm.resize(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) h.perm[i] = i;
  // LSD radix sort, 8 bits a pass over the bits key_bound needs, as on CUDA: each pass is a
  // stable counting sort, so equal keys keep their index order. A pass whose digit is the same
  // for every key is skipped (the high bits of a batch of nearby cells).
  std::vector<int64_t> keys_tmp(static_cast<size_t>(n));
  std::vector<int64_t> perm_tmp(static_cast<size_t>(n));
  for (int shift = 0; shift < 63 && (key_bound >> shift) != 0; shift += 8) {
    int64_t offset[257] = {};
    for (int64_t j = 0; j < n; ++j) ++offset[((h.sorted_keys[j] >> shift) & 255) + 1];
    if (std::find(offset + 1, offset + 257, n) != offset + 257) continue;
    for (int d = 0; d < 256; ++d) offset[d + 1] += offset[d];
    for (int64_t j = 0; j < n; ++j) {
      const int64_t at = offset[(h.sorted_keys[j] >> shift) & 255]++;
      keys_tmp[at] = h.sorted_keys[j];
      perm_tmp[at] = h.perm[j];
    }
    h.sorted_keys.swap(keys_tmp);
    h.perm.swap(perm_tmp);
  }

  for (int64_t j = 0; j < n; ++j) {
    const int64_t key = h.sorted_keys[j];
    if (key == key_bound) break;  // invalid keys sort last
    if (j == 0 || key != h.sorted_keys[j - 1]) {
      h.unique_keys.push_back(key);
      h.starts.push_back(j);
      h.counts.push_back(0);
    }
    ++h.counts.back();
  }
  return h;
}

}  // namespace pointops
