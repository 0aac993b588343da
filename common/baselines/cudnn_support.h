// What the cuDNN baselines share (private to common/baselines/, and only where the course was
// built with cuDNN): one handle, and the check that turns a cuDNN status into an exception.
#pragma once

#include <cudnn.h>

namespace course::baseline::library {

// Throws std::runtime_error naming `expression`, the status and cuDNN's own last error message
// (which says which attribute or which engine refused, where the status alone does not).
void cudnn_check(cudnnStatus_t status, const char* expression);

// The handle, made once; it works on the default stream, like everything the checkers time.
// nullptr where none can be made (no GPU, or a cuDNN that does not match the driver).
cudnnHandle_t cudnn_handle();

}  // namespace course::baseline::library
