"""A Hugging Face checkpoint of a random-initialized small model, and its
logits: the reference runtime/convert's TestConvertHFMatchesTransformers
converts and compares against (no download: transformers builds the model
from a config).

argv: output directory, model_type, config JSON (from_config overrides),
prompt JSON (token ids). Writes the model with save_pretrained (config.json,
model.safetensors) into the directory and prints JSON {"logits": [[...],
...]} (one row per prompt token) to stdout."""
import json
import sys

import torch
import transformers


def main():
    out, model_type = sys.argv[1], sys.argv[2]
    config, tokens = json.loads(sys.argv[3]), json.loads(sys.argv[4])
    cfg = transformers.AutoConfig.for_model(model_type, **config)
    rp = getattr(cfg, "rope_parameters", None)
    if isinstance(rp, dict):  # transformers 5 keeps the rotary settings here
        if "rope_theta" in config:
            rp["rope_theta"] = config["rope_theta"]
        if config.get("rope_scaling"):
            rp.update(config["rope_scaling"])
    torch.manual_seed(0)
    model = transformers.AutoModelForCausalLM.from_config(cfg, attn_implementation="eager", torch_dtype=torch.float32)
    with torch.no_grad():  # the default init (std 0.02) leaves logits near zero: widen it
        for p in model.parameters():
            if p.dim() > 1:
                p.normal_(0, 0.2)
    model.eval()
    model.save_pretrained(out)  # safetensors, the default since transformers 4.35 (5 has no other)
    with torch.no_grad():
        logits = model(torch.tensor([tokens], dtype=torch.long)).logits[0]
    json.dump({"logits": logits.double().tolist(), "transformers": transformers.__version__, "torch": torch.__version__}, sys.stdout)


if __name__ == "__main__":
    main()
