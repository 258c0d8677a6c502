#include "kernel_launch.h"

#include <c10/core/DeviceGuard.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>
#include <dlfcn.h>
#include <torch/library.h>

#include <string>

#include "../common/check.h"

namespace pyg_fast {
namespace {

// The few CUDA driver entry points used here (CUresult is an int, CUfunction and CUstream are
// pointers), looked up in libcuda at first use.
struct Driver {
  int (*launch_kernel)(void* f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz,
                       unsigned shared, void* stream, void** params, void** extra) = nullptr;
  int (*param_info)(void* f, size_t index, size_t* offset, size_t* size) = nullptr;  // CUDA >= 12.4
  int (*error_string)(int error, const char** text) = nullptr;
  int (*ctx_get_current)(void** ctx) = nullptr;
  int (*ctx_set_current)(void* ctx) = nullptr;
  int (*device_get)(int* device, int ordinal) = nullptr;
  int (*primary_ctx_retain)(void** ctx, int device) = nullptr;
};

const Driver& driver() {
  static const Driver loaded = [] {
    Driver d;
    void* lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    TORCH_CHECK(lib != nullptr, "pyg_fast: cannot open the CUDA driver (libcuda.so.1) to launch Triton kernels");
    d.launch_kernel = reinterpret_cast<decltype(d.launch_kernel)>(dlsym(lib, "cuLaunchKernel"));
    d.param_info = reinterpret_cast<decltype(d.param_info)>(dlsym(lib, "cuFuncGetParamInfo"));
    d.error_string = reinterpret_cast<decltype(d.error_string)>(dlsym(lib, "cuGetErrorString"));
    d.ctx_get_current = reinterpret_cast<decltype(d.ctx_get_current)>(dlsym(lib, "cuCtxGetCurrent"));
    d.ctx_set_current = reinterpret_cast<decltype(d.ctx_set_current)>(dlsym(lib, "cuCtxSetCurrent"));
    d.device_get = reinterpret_cast<decltype(d.device_get)>(dlsym(lib, "cuDeviceGet"));
    d.primary_ctx_retain = reinterpret_cast<decltype(d.primary_ctx_retain)>(dlsym(lib, "cuDevicePrimaryCtxRetain"));
    TORCH_CHECK(d.launch_kernel && d.param_info && d.error_string && d.ctx_get_current && d.ctx_set_current &&
                    d.device_get && d.primary_ctx_retain,
                "pyg_fast: the CUDA driver lacks an entry point this launcher uses (a driver for CUDA 12.4 or "
                "newer is needed to launch Triton kernels from C++)");
    return d;
  }();
  return loaded;
}

std::string driver_error(int code) {
  const char* message = nullptr;
  driver().error_string(code, &message);
  return (message ? text(message) : text("unknown error")) + " (CUresult " + std::to_string(code) + ")";
}

constexpr int kCudaErrorInvalidValue = 1;

void check_driver(int status, const char* what) {
  TORCH_CHECK(status == 0, "pyg_fast: ", what, " failed: ", driver_error(status));
}

// A thread that has not used CUDA through the runtime yet (autograd's device threads, say) has no
// current context, which cuLaunchKernel needs: make the device's primary context current, as
// the runtime (and Triton's launcher) would.
void ensure_context(c10::DeviceIndex device) {
  void* ctx = nullptr;
  check_driver(driver().ctx_get_current(&ctx), "cuCtxGetCurrent");
  if (ctx != nullptr) return;
  int handle = 0;
  check_driver(driver().device_get(&handle, device), "cuDeviceGet");
  check_driver(driver().primary_ctx_retain(&ctx, handle), "cuDevicePrimaryCtxRetain");
  check_driver(driver().ctx_set_current(ctx), "cuCtxSetCurrent");
}

unsigned as_unsigned(int64_t value, const char* what) {
  TORCH_CHECK(value >= 0 && value <= UINT32_MAX, "pyg_fast: TritonKernel ", what, " out of range: ",
              std::to_string(value));
  return static_cast<unsigned>(value);
}

}  // namespace

void* current_cuda_stream(c10::DeviceIndex device) {
  const auto* impl = c10::impl::getDeviceGuardImpl(c10::DeviceType::CUDA);
  return impl->getStream(c10::Device(c10::DeviceType::CUDA, device)).native_handle();
}

TritonKernel::TritonKernel(int64_t function, int64_t device, std::vector<int64_t> grid, int64_t num_threads,
                           int64_t shared_bytes, std::vector<int64_t> param_bits, std::vector<int64_t> param_bytes,
                           std::vector<int64_t> param_role, std::vector<at::Tensor> keep_alive)
    : function_(reinterpret_cast<void*>(function)),
      device_(static_cast<c10::DeviceIndex>(device)),
      num_threads_(as_unsigned(num_threads, "block size")),
      shared_bytes_(as_unsigned(shared_bytes, "shared memory size")),
      param_role_(std::move(param_role)),
      keep_alive_(std::move(keep_alive)) {
  TORCH_CHECK(grid.size() == 3, "pyg_fast: TritonKernel needs a 3-D grid");
  for (int i = 0; i < 3; ++i) grid_[i] = as_unsigned(grid[i], "grid");
  TORCH_CHECK(param_bits.size() == param_bytes.size() && param_bits.size() == param_role_.size(),
              "pyg_fast: TritonKernel's parameter lists differ in length");
  for (int64_t role : param_role_) {
    TORCH_CHECK(role >= -1 && role < kNumRoles, "pyg_fast: TritonKernel role out of range: ", std::to_string(role));
  }
  // The compiled kernel's own parameter list must be the one described, plus trailing pointers
  // (Triton's scratch buffers, passed as null: the caller checked that none is needed).
  size_t count = 0;
  for (;; ++count) {
    size_t offset = 0, size = 0;
    int status = driver().param_info(function_, count, &offset, &size);
    if (status == kCudaErrorInvalidValue) break;
    check_driver(status, "cuFuncGetParamInfo");
    if (count < param_bytes.size()) {
      TORCH_CHECK(static_cast<int64_t>(size) == param_bytes[count], "pyg_fast: Triton kernel parameter ",
                  std::to_string(count), " has ", std::to_string(size), " bytes, described as ",
                  std::to_string(param_bytes[count]));
    } else {
      TORCH_CHECK(size == sizeof(void*), "pyg_fast: Triton kernel has an undescribed parameter ",
                  std::to_string(count), " of ", std::to_string(size), " bytes");
    }
  }
  TORCH_CHECK(count >= param_bytes.size(), "pyg_fast: Triton kernel has ", std::to_string(count),
              " parameters, described with ", std::to_string(param_bytes.size()));
  param_bits_.assign(param_bits.begin(), param_bits.end());
  param_bits_.resize(count, 0);
  param_role_.resize(count, -1);
}

void TritonKernel::launch(const RoleTensors& tensors) const {
  TORCH_INTERNAL_ASSERT(tensors.size() == kNumRoles);
  // Parameters are read through pointers to them; a 4-byte integer is the low half of its slot.
  std::vector<uint64_t> values(param_bits_);
  std::vector<void*> params(values.size());
  for (size_t i = 0; i < values.size(); ++i) {
    if (param_role_[i] >= 0) {
      const at::Tensor& t = tensors[param_role_[i]];
      TORCH_INTERNAL_ASSERT(t.defined(), "pyg_fast: no tensor for role ", std::to_string(param_role_[i]));
      TORCH_CHECK(reinterpret_cast<uintptr_t>(t.data_ptr()) % 16 == 0,
                  "pyg_fast: a Triton kernel compiled for 16-byte aligned data got an unaligned tensor");
      values[i] = reinterpret_cast<uintptr_t>(t.data_ptr());
    }
    params[i] = &values[i];
  }
  c10::DeviceGuard guard(c10::Device(c10::DeviceType::CUDA, device_));
  ensure_context(device_);
  int status = driver().launch_kernel(function_, grid_[0], grid_[1], grid_[2], num_threads_, 1, 1, shared_bytes_,
                                      current_cuda_stream(device_), params.data(), nullptr);
  check_driver(status, "launching a Triton kernel");
}

}  // namespace pyg_fast

TORCH_LIBRARY_FRAGMENT(pyg_fast, m) {
  m.class_<pyg_fast::TritonKernel>("TritonKernel")
      .def(torch::init<int64_t, int64_t, std::vector<int64_t>, int64_t, int64_t, std::vector<int64_t>,
                       std::vector<int64_t>, std::vector<int64_t>, std::vector<at::Tensor>>());
}
