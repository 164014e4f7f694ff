"""TRL's SFTTrainer on a tiny random causal LM, a local word-level tokenizer and a local text
dataset; prints the per-step losses as one JSON line on the main process."""

from __future__ import annotations

import argparse
import json

import torch


def tokenizer():
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    words = "the a cat dog sat ran on under mat log big small red blue and".split()
    vocab = {"<pad>": 0, "<eos>": 1, "<unk>": 2, **{word: i + 3 for i, word in enumerate(words)}}
    core = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    core.pre_tokenizer = pre_tokenizers.Whitespace()
    return PreTrainedTokenizerFast(tokenizer_object=core, pad_token="<pad>", eos_token="<eos>", unk_token="<unk>"), words


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--output-dir", required=True)
    args = parser.parse_args()

    from datasets import Dataset
    from transformers import LlamaConfig, LlamaForCausalLM
    from trl import SFTConfig, SFTTrainer

    tok, words = tokenizer()
    generator = torch.Generator().manual_seed(2)
    texts = [" ".join(words[i] for i in torch.randint(0, len(words), (10,), generator=generator).tolist())
             for _ in range(48)]
    torch.manual_seed(0)
    model = LlamaForCausalLM(LlamaConfig(vocab_size=32, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
                                         pad_token_id=0, eos_token_id=1, bos_token_id=1))
    config = SFTConfig(output_dir=args.output_dir, per_device_train_batch_size=4, max_steps=5, learning_rate=1e-3,
                       logging_steps=1, report_to=[], seed=0, use_cpu=True, save_strategy="no", disable_tqdm=True,
                       max_length=16)
    trainer = SFTTrainer(model=model, args=config, train_dataset=Dataset.from_dict({"text": texts}),
                         processing_class=tok)
    trainer.train()
    losses = [entry["loss"] for entry in trainer.state.log_history if "loss" in entry]
    if trainer.is_world_process_zero():
        print("RESULT " + json.dumps({"losses": losses, "world_size": trainer.args.world_size,
                                      "accelerator": type(trainer.accelerator).__module__}))


if __name__ == "__main__":
    main()
