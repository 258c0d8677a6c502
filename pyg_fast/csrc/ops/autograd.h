// What the C++ Autograd kernels of csrc/ops share.
#pragma once

#include <ATen/core/Tensor.h>

#include <optional>

namespace pyg_fast {

// A saved tensor as the optional argument it came from: a node saves an absent optional as an
// undefined tensor.
inline std::optional<at::Tensor> present(const at::Tensor& t) {
  return t.defined() ? std::optional<at::Tensor>(t) : std::nullopt;
}

}  // namespace pyg_fast
