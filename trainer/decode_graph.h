// When generation's decoding step runs as a CUDA graph (Gpt::decode, gpt.cu), and when it is
// captured again. A graph holds the step's kernels with the arguments they were launched with: the
// buffers, whose places depend on the batch (B), and the sampling's settings. What changes from one
// token to the next is read from the GPU's memory (the tokens, the lengths, the uniforms: ops.h),
// so one graph serves every step of the same B and settings, and a refill of the cache (the
// window sliding, generate.h) changes nothing it holds. The first step of a (B, settings) runs its
// ops one by one: they make what they keep on their first call (cuBLASLt's handle and workspace,
// the products' algorithms), which a capture may not do. The next step is captured and run by the
// graph, and every later one replays it, until a step of another B or settings (one graph is
// kept) or new buffers (forget). The CPU tests: tests/kv_cache_test.cpp.
#pragma once

#include "sampling.h"

namespace trainer {

class DecodeGraphPlan {
  public:
    enum Launch {
        kEager,    // the step's ops launched one by one
        kCapture,  // the step captured into a graph, which then runs it
        kReplay,   // the graph launched
    };

    // How the next step of B sequences drawn with `params` runs; `graphs`: whether graphs are
    // wanted and the table's ops allow them (Ops::graph_refusal).
    Launch next(int B, const SamplingParams& params, bool graphs) {
        if (!graphs) return kEager;
        const Key key{B, params.temperature, params.top_k, params.top_p};
        if (captured_ && key == graph_) return kReplay;
        if (ran_ && key == ran_key_) {
            captured_ = true;
            graph_ = key;
            return kCapture;
        }
        ran_ = true;
        ran_key_ = key;
        return kEager;
    }

    // The buffers a graph holds moved (or a capture failed): the next step runs eagerly.
    void forget() { captured_ = ran_ = false; }

  private:
    struct Key {
        int B;
        float temperature;
        int top_k;
        float top_p;
        bool operator==(const Key& o) const {
            return B == o.B && temperature == o.temperature && top_k == o.top_k && top_p == o.top_p;
        }
    };
    bool captured_ = false;  // graph_: the key of the graph captured last
    Key graph_{};
    bool ran_ = false;  // ran_key_: the key of the last step run eagerly with graphs wanted
    Key ran_key_{};
};

}  // namespace trainer
