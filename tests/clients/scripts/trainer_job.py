"""A transformers Trainer job on a tiny random causal LM and a local dataset; prints the per-step
losses (and evaluation) as one JSON line on the main process. Options select the strategy."""

from __future__ import annotations

import argparse
import json
import os

import torch


def build(args: argparse.Namespace):
    from datasets import Dataset
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=128, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64)
    model = LlamaForCausalLM(config)
    generator = torch.Generator().manual_seed(1)
    ids = torch.randint(0, 128, (64, 16), generator=generator)
    rows = {"input_ids": ids.tolist(), "labels": ids.tolist()}
    train = Dataset.from_dict(rows)
    evaluation = Dataset.from_dict({k: v[:16] for k, v in rows.items()})
    return model, train, evaluation


def check_adapter(trainer, args: argparse.Namespace) -> dict:
    """Save the LoRA adapter, load it onto a fresh copy of the base model, compare the logits."""
    from peft import PeftModel

    folder = os.path.join(args.output_dir, "adapter")
    trainer.save_model(folder)
    trainer.accelerator.wait_for_everyone()
    trained = trainer.accelerator.unwrap_model(trainer.model).eval()
    loaded = PeftModel.from_pretrained(build(args)[0], folder).eval()
    ids = torch.randint(0, 128, (2, 16), generator=torch.Generator().manual_seed(5))
    with torch.no_grad():
        same = torch.allclose(trained(input_ids=ids).logits.float(), loaded(input_ids=ids).logits.float(), atol=1e-5)
    files = sorted(os.listdir(folder))
    return {"adapter_files": files, "adapter_reloads": same}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--output-dir", required=True)
    parser.add_argument("--max-steps", type=int, default=6)
    parser.add_argument("--accumulation", type=int, default=1)
    parser.add_argument("--bf16", action="store_true")
    parser.add_argument("--fsdp", action="store_true")
    parser.add_argument("--deepspeed", default=None, help="a DeepSpeed config file")
    parser.add_argument("--save-steps", type=int, default=0)
    parser.add_argument("--resume", action="store_true")
    parser.add_argument("--peft", action="store_true")
    args = parser.parse_args()

    from transformers import Trainer, TrainingArguments

    model, train, evaluation = build(args)
    if args.peft:
        from peft import LoraConfig, get_peft_model

        model = get_peft_model(model, LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"],
                                                 task_type="CAUSAL_LM"))
    extra = {}
    if args.fsdp:
        extra.update(fsdp="full_shard", fsdp_config={"fsdp_version": 2, "auto_wrap_policy": "TRANSFORMER_BASED_WRAP",
                                                      "transformer_layer_cls_to_wrap": ["LlamaDecoderLayer"]})
    if args.deepspeed:
        extra.update(deepspeed=args.deepspeed)
    training_args = TrainingArguments(
        output_dir=args.output_dir, per_device_train_batch_size=4, per_device_eval_batch_size=4,
        gradient_accumulation_steps=args.accumulation, max_steps=args.max_steps, learning_rate=1e-3,
        logging_steps=1, report_to=[], seed=0, bf16=args.bf16, use_cpu=True, eval_strategy="no",
        save_strategy="steps" if args.save_steps else "no", save_steps=args.save_steps or 500,
        dataloader_num_workers=0, disable_tqdm=True, **extra)
    trainer = Trainer(model=model, args=training_args, train_dataset=train, eval_dataset=evaluation)
    trainer.train(resume_from_checkpoint=True if args.resume else None)
    metrics = trainer.evaluate()
    losses = [entry["loss"] for entry in trainer.state.log_history if "loss" in entry]
    extra_result = {}
    if args.peft:
        extra_result = check_adapter(trainer, args)
    if trainer.is_world_process_zero():
        print("RESULT " + json.dumps({**extra_result, "losses": losses, "eval_loss": metrics["eval_loss"],
                                      "world_size": trainer.args.world_size,
                                      "accelerator": type(trainer.accelerator).__module__,
                                      "distributed_type": trainer.accelerator.distributed_type.value,
                                      "fsdp": trainer.is_fsdp_enabled, "deepspeed": trainer.is_deepspeed_enabled,
                                      "wrapped": type(trainer.model_wrapped).__name__}))


if __name__ == "__main__":
    main()
