// The parts of ATen the kernels use: the Tensor class and its methods, the dispatch macros,
// parallel_for, and the per-operator headers of the ops called as at::op(...) in csrc/.
// <ATen/ATen.h> declares every operator, and parsing it was about a third of each source's
// compile time (features_cuda.cu: 33.9 s with it, 24.5 s without). An op newly called as
// at::op(...) gets its <ATen/ops/op.h> here.
#pragma once

#include <ATen/Dispatch.h>
#include <ATen/Parallel.h>
#include <ATen/core/Tensor.h>
#include <ATen/ops/add.h>
#include <ATen/ops/arange.h>
#include <ATen/ops/bitwise_and.h>
#include <ATen/ops/bitwise_not.h>
#include <ATen/ops/bitwise_right_shift.h>
#include <ATen/ops/bitwise_xor.h>
#include <ATen/ops/cat.h>
#include <ATen/ops/constant_pad_nd.h>
#include <ATen/ops/cummax.h>
#include <ATen/ops/div.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/empty_like.h>
#include <ATen/ops/full.h>
#include <ATen/ops/full_like.h>
#include <ATen/ops/gt.h>
#include <ATen/ops/logical_and.h>
#include <ATen/ops/logical_not.h>
#include <ATen/ops/lt.h>
#include <ATen/ops/mul.h>
#include <ATen/ops/ones.h>
#include <ATen/ops/remainder.h>
#include <ATen/ops/rsub.h>
#include <ATen/ops/scalar_tensor.h>
#include <ATen/ops/sort.h>
#include <ATen/ops/stack.h>
#include <ATen/ops/sub.h>
#include <ATen/ops/tensor.h>
#include <ATen/ops/topk.h>
#include <ATen/ops/where.h>
#include <ATen/ops/zeros.h>
#include <ATen/ops/zeros_like.h>
