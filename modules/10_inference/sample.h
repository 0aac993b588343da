// Contract of 10_inference/sample. Read-only: the checker calls exactly this.
#pragma once

// Draws one token per row of logits with temperature, top-k and top-p (nucleus) sampling, from
// a uniform random number given per row. Per row (ties at a threshold are always all kept):
//  1. top-k, when 0 < top_k < vocab: keep the tokens whose logit is >= t_k, the top_k-th largest
//     logit of the row counted with multiplicity (so more than top_k tokens are kept when others
//     tie with the top_k-th); top_k == 0 or >= vocab keeps every token.
//  2. the weights e_i = exp((l_i - max_j l_j) / temperature) of the tokens kept so far, Z their
//     sum.
//  3. top-p, when top_p < 1: t_p is the largest logit value v of the kept tokens such that the
//     kept tokens with l_i >= v hold at least top_p * Z; keep the tokens with l_i >= t_p (the
//     token whose weight carries the sum past top_p * Z is kept).
//  4. p_i = e_i / (the sum of the kept e_i); tokens[r] is the first kept token i, in vocabulary
//     order, whose cumulative probability p_0 + ... + p_i (kept tokens only) exceeds uniforms[r].
// - logits: [rows][vocab] float32, each finite or -INFINITY, at least one finite per row;
//   uniforms: [rows] in [0, 1); tokens: [rows] int. All device pointers, none aliasing another.
// - 1 <= rows <= 2^20; 1 <= vocab <= 2^18; temperature > 0; top_k >= 0; 0 < top_p <= 1.
// - Sums in float32 or finer (fixed point is fine): where a uniform or top_p lies within 1e-4 of
//   a boundary of the cumulative probabilities, rounding may pick the neighbour, and the checker
//   keeps its draws away from there. Deterministic: the same inputs give the same tokens on
//   every call (the checker compares every timed call's tokens with the first's).
// Enqueue the work on the default stream and return; the checker synchronizes.
void sample(const float* logits, const float* uniforms, int* tokens, int rows, int vocab,
            float temperature, int top_k, float top_p);
