// Contract of 02_memory/transpose. Read-only: the checker calls exactly this.
#pragma once

// out = the transpose of in:  out[c * rows + r] = in[r * cols + c]  for every 0 <= r < rows,
// 0 <= c < cols.
// in is a rows x cols matrix, out a cols x rows matrix, both row-major and dense (the row stride
// is the row length), both device pointers, and they do not overlap. 1 <= rows, cols <= 2^20 and
// rows * cols < 2^31; neither rows nor cols needs to be a multiple of anything. Enqueue the work
// on the default stream and return; the checker synchronizes.
void transpose(const float* in, float* out, int rows, int cols);
