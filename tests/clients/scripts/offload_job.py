"""from_pretrained(device_map="auto", max_memory, offload_folder) with part of a tiny random
causal LM on disk: prints whether its logits and generate() tokens equal the whole model's."""

from __future__ import annotations

import json
import sys
import tempfile

import torch


def main() -> None:
    from transformers import AutoModelForCausalLM, LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=256, hidden_size=64, intermediate_size=128, num_hidden_layers=4,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64)
    with tempfile.TemporaryDirectory() as folder:
        LlamaForCausalLM(config).save_pretrained(f"{folder}/model")
        whole = AutoModelForCausalLM.from_pretrained(f"{folder}/model").eval()
        # room for about two decoder layers in memory: the rest goes to the CPU and to disk;
        # sizes written as strings, as most users write them (transformers compares the
        # caller's values after accelerate's get_max_memory has converted them in place)
        layer_bytes = sum(p.numel() * p.element_size() for p in whole.model.layers[0].parameters())
        max_memory = {"cpu": f"{layer_bytes * 2.5 / 1000:.0f}KB", "disk": "1GB"}
        offloaded = AutoModelForCausalLM.from_pretrained(
            f"{folder}/model", device_map="auto", max_memory=max_memory,
            offload_folder=f"{folder}/offload").eval()
        placement = sorted(set(getattr(offloaded, "hf_device_map", {}).values()), key=str)
        ids = torch.randint(0, 256, (2, 12), generator=torch.Generator().manual_seed(3))
        with torch.no_grad():
            same_logits = torch.equal(whole(ids).logits, offloaded(ids).logits)
            mask = torch.ones_like(ids)
            expected = whole.generate(ids, attention_mask=mask, max_new_tokens=8, do_sample=False, pad_token_id=0)
            got = offloaded.generate(ids, attention_mask=mask, max_new_tokens=8, do_sample=False, pad_token_id=0)
    streamers = {id(hook.streamer): hook.streamer for module in offloaded.modules()
                 for hook in [getattr(module, "_hf_hook", None)] if getattr(hook, "streamer", None) is not None}
    print("RESULT " + json.dumps({"placement": [str(p) for p in placement], "same_logits": same_logits,
                                  "same_tokens": torch.equal(expected, got), "max_memory_after": max_memory,
                                  "streamers": [{"read_ahead": s.taken_read_ahead, "on_demand": s.taken_on_demand}
                                                for s in streamers.values()]}))
    sys.exit(0)


if __name__ == "__main__":
    main()
