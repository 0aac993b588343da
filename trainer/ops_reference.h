// The pieces of the reference ops (ops_reference.cu) that the exercise tables (ops_learner.cu)
// call around the learner's kernels, so that what is not the learner's is the reference's own.
#pragma once

namespace trainer {

// `count` tensors packed [B, T, count, NH, HS] (the qkv projection's output: count 3) copied to
// count tensors [B, NH, T, HS] one after another (attention's per-head layout), and back,
// converting between float and bf16 on the way (To and From are either).
template <typename To, typename From>
void to_heads(To* heads, const From* packed, int count, int B, int T, int NH, int HS);
template <typename To, typename From>
void from_heads(To* packed, const From* heads, int count, int B, int T, int NH, int HS);

// GPT-2's GELU (the tanh approximation) on n values; and dinp = GELU'(inp) * dout (dinp may be
// dout). The reference fuses both into its products' epilogues; these are the same formulas as
// passes of their own.
template <typename Act>
void gelu_forward_reference(Act* out, const Act* inp, long long n);
template <typename Act>
void gelu_backward_reference(Act* dinp, const Act* inp, const Act* dout, long long n);

}  // namespace trainer
