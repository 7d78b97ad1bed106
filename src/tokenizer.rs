//! Local token counting, for when a server reports no `usage` (llama.cpp's streams) and
//! for the lengths of dataset prompts. A count made here is an estimate unless the
//! tokenizer is the server's own, so records mark it as such.

use std::path::Path;
use std::sync::{Arc, OnceLock};

use tiktoken_rs::CoreBPE;

/// A tokenizer that counts tokens in text.
#[derive(Clone)]
pub enum LocalTokenizer {
    /// The simulator's tokenizer: exact against `url: embedded`.
    Sim,
    /// An OpenAI BPE (the ranks ship inside the `tiktoken-rs` crate: no download).
    Bpe(&'static CoreBPE, &'static str),
    /// A Hugging Face `tokenizer.json`: the served model's own, so counts are exact.
    HuggingFace(Arc<HuggingFaceTokenizer>),
}

/// A loaded `tokenizer.json` and the path it came from.
pub struct HuggingFaceTokenizer {
    tokenizer: tokenizers::Tokenizer,
    path: String,
}

impl std::fmt::Debug for LocalTokenizer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

impl LocalTokenizer {
    /// Names accepted for `tokenizer:`, besides a `tokenizer.json` path.
    pub const NAMES: &[&str] = &["cl100k_base", "o200k_base", "sim"];

    /// A tokenizer by name (loading, once, the BPE ranks it needs), or a path to a
    /// Hugging Face `tokenizer.json` or the model directory holding one.
    pub fn by_name(name: &str) -> Result<LocalTokenizer, String> {
        static CL100K: OnceLock<CoreBPE> = OnceLock::new();
        static O200K: OnceLock<CoreBPE> = OnceLock::new();
        let load = |cell: &'static OnceLock<CoreBPE>,
                    make: fn() -> anyhow::Result<CoreBPE>,
                    name: &'static str| {
            // The ranks are compiled into the binary; failing to parse them is a bug.
            LocalTokenizer::Bpe(
                cell.get_or_init(|| make().expect("bundled BPE ranks parse")),
                name,
            )
        };
        match name {
            "sim" => Ok(LocalTokenizer::Sim),
            "cl100k_base" => Ok(load(&CL100K, tiktoken_rs::cl100k_base, "cl100k_base")),
            "o200k_base" => Ok(load(&O200K, tiktoken_rs::o200k_base, "o200k_base")),
            path if path.ends_with(".json") || Path::new(path).is_dir() => {
                LocalTokenizer::from_file(Path::new(path))
            }
            other => Err(format!(
                "unknown tokenizer `{other}`: choose from {}, or give the path of a Hugging Face tokenizer.json",
                LocalTokenizer::NAMES.join(", ")
            )),
        }
    }

    /// Loads a `tokenizer.json`, or the one inside a model directory.
    fn from_file(path: &Path) -> Result<LocalTokenizer, String> {
        let file = if path.is_dir() {
            path.join("tokenizer.json")
        } else {
            path.to_owned()
        };
        let tokenizer = tokenizers::Tokenizer::from_file(&file)
            .map_err(|e| format!("cannot load the tokenizer {}: {e}", file.display()))?;
        Ok(LocalTokenizer::HuggingFace(Arc::new(
            HuggingFaceTokenizer {
                tokenizer,
                path: file.display().to_string(),
            },
        )))
    }

    pub fn name(&self) -> &str {
        match self {
            LocalTokenizer::Sim => "sim",
            LocalTokenizer::Bpe(_, name) => name,
            LocalTokenizer::HuggingFace(hf) => &hf.path,
        }
    }

    pub fn count(&self, text: &str) -> usize {
        match self {
            LocalTokenizer::Sim => crate::tokenize::count(text),
            LocalTokenizer::Bpe(bpe, _) => bpe.encode_ordinary(text).len(),
            // Without special tokens, like the BPEs: the text's own tokens. Encoding
            // fails only for a tokenizer.json that pads or truncates to an impossible
            // length; counting such text as no tokens would hide it, so the simulator's
            // word count stands in.
            LocalTokenizer::HuggingFace(hf) => hf
                .tokenizer
                .encode(text, false)
                .map_or_else(|_| crate::tokenize::count(text), |e| e.len()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cl100k_counts_like_openai() {
        let cl100k = LocalTokenizer::by_name("cl100k_base").unwrap();
        // Reference counts from OpenAI's tokenizer.
        assert_eq!(cl100k.count("hello world"), 2);
        assert_eq!(
            cl100k.count("The quick brown fox jumps over the lazy dog."),
            10
        );
        assert_eq!(
            LocalTokenizer::by_name("sim").unwrap().count("hello world"),
            2
        );
    }

    #[test]
    fn synthetic_words_are_one_token_in_cl100k_too() {
        // So synthetic prompts have exact lengths for real servers with BPE tokenizers.
        let cl100k = LocalTokenizer::by_name("cl100k_base").unwrap();
        let long: Vec<&str> = crate::tokenize::WORDS
            .iter()
            .copied()
            .filter(|w| cl100k.count(&format!(" {w}")) != 1)
            .collect();
        assert!(long.is_empty(), "more than one cl100k token: {long:?}");
    }

    #[test]
    fn a_tokenizer_json_or_its_directory_loads_and_counts_by_its_own_rules() {
        let dir = std::env::temp_dir().join(format!("redline-tokenizer-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("tokenizer.json");
        std::fs::write(
            &file,
            crate::tokenize::huggingface_tokenizer_json().to_string(),
        )
        .unwrap();
        // The simulator cuts long words every 8 bytes; cl100k_base does not.
        let text = " internationalisation é";
        let cl100k = LocalTokenizer::by_name("cl100k_base").unwrap().count(text);
        for path in [&file, &dir] {
            let hf = LocalTokenizer::by_name(path.to_str().unwrap()).unwrap();
            assert_eq!(hf.count(text), 5);
            assert_ne!(hf.count(text), cl100k);
        }
        let missing = LocalTokenizer::by_name("/nonexistent/tokenizer.json").unwrap_err();
        assert!(
            missing.starts_with("cannot load the tokenizer /nonexistent/tokenizer.json: "),
            "{missing}"
        );
        std::fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    fn unknown_names_list_the_choices() {
        assert_eq!(
            LocalTokenizer::by_name("gpt2").unwrap_err(),
            "unknown tokenizer `gpt2`: choose from cl100k_base, o200k_base, sim, or give the path of a Hugging Face tokenizer.json"
        );
    }
}
