//! Local token counting, for when a server reports no `usage` (llama.cpp's streams) and
//! for the lengths of dataset prompts. A count made here is an estimate unless the
//! tokenizer is the server's own, so records mark it as such.

use std::sync::OnceLock;

use tiktoken_rs::CoreBPE;

/// Names accepted for `tokenizer:`.
pub const NAMES: &[&str] = &["cl100k_base", "o200k_base", "sim"];

/// A tokenizer that counts tokens in text.
#[derive(Clone, Copy)]
pub enum LocalTokenizer {
    /// The simulator's tokenizer: exact against `url: embedded`.
    Sim,
    /// An OpenAI BPE (the ranks ship inside the `tiktoken-rs` crate: no download).
    Bpe(&'static CoreBPE, &'static str),
}

impl std::fmt::Debug for LocalTokenizer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

impl LocalTokenizer {
    /// A tokenizer by name; loads (once) the BPE ranks it needs.
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
            other => Err(format!(
                "unknown tokenizer `{other}`: choose from {}",
                NAMES.join(", ")
            )),
        }
    }

    pub fn name(&self) -> &'static str {
        match self {
            LocalTokenizer::Sim => "sim",
            LocalTokenizer::Bpe(_, name) => name,
        }
    }

    pub fn count(&self, text: &str) -> usize {
        match self {
            LocalTokenizer::Sim => crate::tokenize::count(text),
            LocalTokenizer::Bpe(bpe, _) => bpe.encode_ordinary(text).len(),
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
    fn unknown_names_list_the_choices() {
        assert_eq!(
            LocalTokenizer::by_name("gpt2").unwrap_err(),
            "unknown tokenizer `gpt2`: choose from cl100k_base, o200k_base, sim"
        );
    }
}
