// The parallel hash array on the CPU: the twin of hash_array.cuh, contract in hash_array.h.
// One call builds it for one batch of keys on the calling thread; kernels that are parallel over
// clouds build one per cloud.
#pragma once

#include <algorithm>
#include <cstdint>
#include <utility>
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
  int64_t find(int64_t key) const {
    return hash_array::find_run(unique_keys.data(), num_unique(), key);
  }
};

// keys: n values in [0, key_bound]; key_bound marks an invalid element.
inline HashArrayCpu build_hash_array_cpu(const int64_t* keys, int64_t n, int64_t key_bound) {
  std::vector<std::pair<int64_t, int64_t>> pairs(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) pairs[i] = {keys[i], i};
  // (key, index) pairs are distinct, so ordering them is the stable sort by key.
  std::sort(pairs.begin(), pairs.end());

  HashArrayCpu h;
  h.sorted_keys.resize(static_cast<size_t>(n));
  h.perm.resize(static_cast<size_t>(n));
  for (int64_t j = 0; j < n; ++j) {
    const int64_t key = pairs[j].first;
    h.sorted_keys[j] = key;
    h.perm[j] = pairs[j].second;
    if (key == key_bound) continue;  // invalid keys sort last: no run starts here or after
    if (j == 0 || key != pairs[j - 1].first) {
      h.unique_keys.push_back(key);
      h.starts.push_back(j);
      h.counts.push_back(0);
    }
    ++h.counts.back();
  }
  return h;
}

}  // namespace pointops
