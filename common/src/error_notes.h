// What the harness adds to the text of a CUDA error (course::cuda_error_context, course/check.h):
// the usual meaning of a refused launch or a misaligned address, and which input a load read past
// the end of (end_guard.h). Internal to the harness; main() installs it.
#pragma once

namespace course {

void install_error_notes();

}  // namespace course
