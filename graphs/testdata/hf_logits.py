"""Logits of a Hugging Face transformers model built from a config and
weights that graphs/transformers_test.go writes: the reference the brief asks
for on a random-initialized small config (no download). Reads the weights
file named by argv[1], writes JSON {"logits": [[...], ...]} (one row per
prompt token) to stdout.

The file is a little-endian uint64 header length, a JSON header
{"model_type", "config", "tokens", "tensors": {name: {"offset", "shape"}}},
then float32 data (offsets from the end of the header)."""
import json
import struct
import sys

import torch
import transformers


def main():
    with open(sys.argv[1], "rb") as f:
        (n,) = struct.unpack("<Q", f.read(8))
        head = json.loads(f.read(n))
        data = f.read()
    cfg = transformers.AutoConfig.for_model(head["model_type"], **head["config"])
    theta = head["config"].get("rope_theta")
    rp = getattr(cfg, "rope_parameters", None)
    if theta is not None and isinstance(rp, dict):
        rp["rope_theta"] = theta  # transformers 5 keeps it here
    torch.manual_seed(0)
    model = transformers.AutoModelForCausalLM.from_config(cfg, attn_implementation="eager", torch_dtype=torch.float32)
    sd = {}
    for name, t in head["tensors"].items():
        count = 1
        for d in t["shape"]:
            count *= d
        buf = data[t["offset"] : t["offset"] + 4 * count]
        sd[name] = torch.frombuffer(bytearray(buf), dtype=torch.float32).reshape(t["shape"])
    missing, unexpected = model.load_state_dict(sd, strict=False)
    missing = [k for k in missing if not (k == "lm_head.weight" and cfg.tie_word_embeddings)]
    if missing or unexpected:
        sys.exit(f"weights do not match the model: missing {missing}, unexpected {unexpected}")
    model.tie_weights()
    model.eval()
    with torch.no_grad():
        out = model(torch.tensor([head["tokens"]], dtype=torch.long)).logits[0]
    json.dump({"logits": out.double().tolist(), "transformers": transformers.__version__, "torch": torch.__version__}, sys.stdout)


if __name__ == "__main__":
    main()
