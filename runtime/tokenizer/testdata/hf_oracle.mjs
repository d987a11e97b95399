// Generates hf_oracle.json: the ids @lenml/tokenizers (a transformers.js
// fork, i.e. Hugging Face's tokenizer semantics) gives for extra strings with
// the tokenizer.json files in testdata/tokenizers/. Run once, from the repo
// root, and commit the output; the Go tests do not need node:
//
//   mkdir -p /tmp/oracle && (cd /tmp/oracle && npm init -y && npm install @lenml/tokenizers@3.7.2)
//   NODE_PATH=/tmp/oracle/node_modules node runtime/tokenizer/testdata/hf_oracle.mjs
//
// Added tokens are always matched by transformers.js, so the Go side
// compares with Encode(s, false, true).
import { createRequire } from "node:module";
import { readFileSync, writeFileSync } from "node:fs";
import { gunzipSync } from "node:zlib";

const require = createRequire(import.meta.url);
const { TokenizerLoader } = require("@lenml/tokenizers");
const pkgPath = require.resolve("@lenml/tokenizers").replace(/dist[\\/]main\.js$/, "package.json");
const pkg = JSON.parse(readFileSync(pkgPath, "utf8"));

const inputs = [
  // roundtrip_test.go's tricky corpus
  "", " ", "  ", "   ", "\t", "\n", "\n\n", "\r\n", "a\r\nb\r\n", " \t \n ",
  "Hello world", " Hello world", "Hello  world  ", "  leading", "trailing   ",
  "line1\nline2\n\n\nline3", "tab\tseparated\tvalues",
  "0", "123", "1234567890", "3.14159 + 2,718 = 5.86", "٣٤٥ ۶۷",
  "Äpfel über Straße, café naïve résumé", "Cửa Việt", "нещо на Български", "Ελληνικά κείμενο",
  "我想在apple工作1314151天～", "日本語のテキスト、カタカナ", "한국어 텍스트",
  "🦙 llama", "👨‍👩‍👧‍👦 family", "🏳️‍🌈 flag", "🇫🇷🇩🇪 flags", "😶‍🌫️ (multiple emojis)", "✅",
  "func main() {\n\tfmt.Println(\"hi\")\n}\n", "    indented\n        more", "if (a && b) { return x->y; }",
  "it's we'll they're I'd you've", "' era", "!!!!!!", "...", "¿Qué? ¡Sí!",
  "\u00a0nbsp\u00a0", "zero\u200bwidth", "\u3000ideographic space", "a\u0301 combining",
  "<s> not special </s>", "<|endoftext|> text", "\x00\x01\x7f control bytes",
  // more
  "IT'S WE'LL THEY'RE I'D YOU'VE", "don't 'tis o'clock", "12345678901234567890", "1,000,000.00 and 3.5e-10",
  "x = [1, 2, 3]; y = {'a': 1}\r\n", "def f(x):\n    return x ** 2\n\n\n", "<html><body>&amp;</body></html>",
  "https://example.com/path?q=1&r=2#frag", "user@example.com", "C:\\Windows\\System32", "a\tb\t\tc\n\t\td",
  "   \n\n   \n", "\n \n \n", "word\u2028line\u2029para", "\u000b\u000c vertical", "end with space ",
  "Ünïcödé ẞ ß ǅ ǈ", "Tiếng Việt có dấu", "العربية نص", "עברית טקסט", "हिन्दी पाठ", "ภาษาไทย", "ქართული",
  "Ελληνικά ΚΕΦΑΛΑΙΑ", "中文，标点。符号！", "ｆｕｌｌｗｉｄｔｈ　ＡＢＣ１２３", "emoji🙂in😀text", "🧑🏽‍💻 coder",
  "\u0301leading mark", "e\u0301e\u0301e\u0301", "😀😀😀😀", "a" + "b".repeat(200), " ".repeat(33) + "x",
  "<|im_start|>user\nHi<|im_end|>", "<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|>",
  "<think>\nok\n</think>\n\nanswer", "<tool_call>{\"name\": \"f\"}</tool_call>",
];

const out = { generator: "runtime/tokenizer/testdata/hf_oracle.mjs", lenml_tokenizers: pkg.version, tokenizers: {} };
for (const name of ["llama3", "qwen3", "deepseek_v3"]) {
  const rd = (f) => JSON.parse(gunzipSync(readFileSync(`testdata/tokenizers/${name}.${f}.json.gz`)).toString("utf8"));
  const tok = TokenizerLoader.fromPreTrained({ tokenizerJSON: rd("tokenizer"), tokenizerConfig: rd("tokenizer_config") });
  out.tokenizers[name] = inputs.map((s) => ({
    input: s,
    nfc: s.normalize("NFC") === s,
    ids: Array.from(tok.encode(s, { add_special_tokens: false })),
  }));
}
writeFileSync("runtime/tokenizer/testdata/hf_oracle.json", JSON.stringify(out, null, 0) + "\n");
