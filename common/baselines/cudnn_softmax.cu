// cuDNN's softmax (legacy API), the library baseline of the softmax exercises in module 06, and
// the handle and status check the cuDNN baselines share (cudnn_support.h). The handle and the
// tensor descriptor are made once; the descriptor is re-shaped only when the matrix size changes,
// so timed samples measure the kernel and not the set-up.
#include <stdexcept>
#include <string>

#include "library.h"

#if COURSE_HAVE_CUDNN
#include "cudnn_support.h"
#endif

namespace course::baseline::library {

#if COURSE_HAVE_CUDNN

void cudnn_check(cudnnStatus_t status, const char* expression) {
    if (status == CUDNN_STATUS_SUCCESS) return;
    char detail[1024] = "";
    cudnnGetLastErrorString(detail, sizeof detail);
    throw std::runtime_error(std::string("cuDNN error ") + cudnnGetErrorString(status) + " in `" +
                             expression + "`" + (*detail ? std::string(": ") + detail : ""));
}

cudnnHandle_t cudnn_handle() {
    static const cudnnHandle_t handle = [] {
        cudnnHandle_t h = nullptr;
        return cudnnCreate(&h) == CUDNN_STATUS_SUCCESS ? h : nullptr;
    }();
    return handle;
}

namespace {

// A rows x cols matrix as an NCHW tensor of rows x cols x 1 x 1: INSTANCE mode normalizes over
// C * H * W = cols for each of the N = rows images, i.e. over each row.
cudnnTensorDescriptor_t matrix_descriptor(int rows, int cols) {
    static const cudnnTensorDescriptor_t descriptor = [] {
        cudnnTensorDescriptor_t d = nullptr;
        cudnn_check(cudnnCreateTensorDescriptor(&d), "cudnnCreateTensorDescriptor");
        return d;
    }();
    static int shaped_rows = 0, shaped_cols = 0;
    if (rows != shaped_rows || cols != shaped_cols) {
        cudnn_check(cudnnSetTensor4dDescriptor(descriptor, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT,
                                               rows, cols, 1, 1),
                    "cudnnSetTensor4dDescriptor");
        shaped_rows = rows;
        shaped_cols = cols;
    }
    return descriptor;
}

}  // namespace

bool cudnn_available() { return cudnn_handle() != nullptr; }

void cudnn_softmax(const float* in, float* out, int rows, int cols) {
    if (!cudnn_available())
        throw std::runtime_error("cudnn_softmax: no cuDNN handle on this machine");
    const cudnnTensorDescriptor_t matrix = matrix_descriptor(rows, cols);
    const float alpha = 1.0f, beta = 0.0f;  // out = alpha * softmax(in) + beta * out
    // ACCURATE subtracts the row maximum before exponentiating, as the exercises do.
    cudnn_check(
        cudnnSoftmaxForward(cudnn_handle(), CUDNN_SOFTMAX_ACCURATE, CUDNN_SOFTMAX_MODE_INSTANCE,
                            &alpha, matrix, in, &beta, matrix, out),
        "cudnnSoftmaxForward");
}

#else

bool cudnn_available() { return false; }

void cudnn_softmax(const float*, float*, int, int) {
    throw std::runtime_error(
        "cudnn_softmax: the course was built without cuDNN (set COURSE_CUDNN_ROOT)");
}

#endif

}  // namespace course::baseline::library
