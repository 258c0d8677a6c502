// Argument checks shared by the op bindings (CPU and CUDA).
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/util/Exception.h>

#include <c10/core/Device.h>
#include <c10/core/ScalarType.h>
#include <c10/util/ArrayRef.h>

#include <string>
#include <type_traits>

#include "reduce.h"

namespace pyg_fast {

// Error messages are assembled from strings only: numbers go through std::to_string, shapes,
// devices and dtypes through torch's own to-string functions, never through an iostream in this
// library. A toolchain seen on the GPU machine links a private libstdc++ into extensions whose
// stream number formatting crashes next to torch's (a segfault instead of the error).
inline std::string text(const char* s) { return s; }
inline std::string text(const std::string& s) { return s; }
inline std::string text(c10::string_view s) { return std::string(s.data(), s.size()); }
inline std::string text(c10::ScalarType t) { return c10::toString(t); }
inline std::string text(const c10::Device& d) { return d.str(); }
inline std::string text(c10::IntArrayRef sizes) {
  std::string s = "[";
  for (size_t i = 0; i < sizes.size(); ++i) s += (i ? ", " : "") + std::to_string(sizes[i]);
  return s + "]";
}
template <typename T, std::enable_if_t<std::is_arithmetic_v<T> && !std::is_same_v<T, bool>, int> = 0>
std::string text(T value) {
  return std::to_string(value);
}
template <typename... Args>
std::string message(const Args&... args) {
  std::string s;
  ((s += text(args)), ...);
  return s;
}

#define PF_CHECK(cond, ...) TORCH_CHECK(cond, ::pyg_fast::message(__VA_ARGS__))
#define PF_CHECK_VALUE(cond, ...) TORCH_CHECK_VALUE(cond, ::pyg_fast::message(__VA_ARGS__))
#define PF_CHECK_TYPE(cond, ...) TORCH_CHECK_TYPE(cond, ::pyg_fast::message(__VA_ARGS__))
#define PF_CHECK_INDEX(cond, ...) TORCH_CHECK_INDEX(cond, ::pyg_fast::message(__VA_ARGS__))

inline Reduce parse_reduce(const std::string& reduce) {
  if (reduce == "sum" || reduce == "add") return Reduce::Sum;
  if (reduce == "mean") return Reduce::Mean;
  if (reduce == "max" || reduce == "amax") return Reduce::Max;
  if (reduce == "min" || reduce == "amin") return Reduce::Min;
  PF_CHECK_VALUE(false, "pyg_fast: reduce must be one of 'sum', 'mean', 'max', 'min', got '",
                    reduce, "'");
}

inline void check_ptr(const at::Tensor& ptr) {
  PF_CHECK_VALUE(ptr.dim() == 1 && ptr.numel() >= 1,
                    "pyg_fast: 'ptr' must be a non-empty 1-D tensor, got shape ", ptr.sizes());
  PF_CHECK_TYPE(ptr.scalar_type() == at::kLong, "pyg_fast: 'ptr' must be int64, got ",
                   ptr.scalar_type());
  PF_CHECK_VALUE(ptr.is_contiguous(), "pyg_fast: 'ptr' must be contiguous");
}

inline void check_index(const at::Tensor& index, const char* name, bool int32_allowed = false) {
  PF_CHECK_VALUE(index.dim() == 1, "pyg_fast: '", name, "' must be 1-D, got shape ",
                    index.sizes());
  PF_CHECK_TYPE(index.scalar_type() == at::kLong || (int32_allowed && index.scalar_type() == at::kInt),
                "pyg_fast: '", name, "' must be int64", int32_allowed ? " or int32" : "", ", got ",
                index.scalar_type());
  PF_CHECK_VALUE(index.is_contiguous(), "pyg_fast: '", name, "' must be contiguous");
}

inline void check_floating(const at::Tensor& t, const char* name) {
  PF_CHECK_TYPE(at::isFloatingType(t.scalar_type()), "pyg_fast: '", name,
                   "' must be a floating point tensor, got ", t.scalar_type());
  PF_CHECK_VALUE(t.is_contiguous(), "pyg_fast: '", name, "' must be contiguous");
}

inline void check_same_device(const at::Tensor& a, const at::Tensor& b, const char* na,
                              const char* nb) {
  PF_CHECK_VALUE(a.device() == b.device(), "pyg_fast: '", na, "' is on ", a.device(),
                    " but '", nb, "' is on ", b.device());
}

// Optional per-edge weight of shape [E, H] for features of size F = H * D.
inline void check_edge_weight(const at::Tensor& weight, const at::Tensor& x, int64_t num_edges,
                              int64_t num_features) {
  check_floating(weight, "weight");
  check_same_device(weight, x, "weight", "x");
  PF_CHECK_TYPE(weight.scalar_type() == x.scalar_type(),
                   "pyg_fast: 'weight' must have the dtype of 'x' (", x.scalar_type(), "), got ",
                   weight.scalar_type());
  PF_CHECK_VALUE(weight.dim() == 2 && weight.size(0) == num_edges && weight.size(1) >= 1 &&
                        num_features % weight.size(1) == 0,
                    "pyg_fast: 'weight' must have shape [E, H] with E = ", num_edges,
                    " and H dividing the feature size ", num_features, ", got ", weight.sizes());
}

}  // namespace pyg_fast
