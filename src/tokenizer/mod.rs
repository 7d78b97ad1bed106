//! Local token counting, for when a server reports no `usage` (llama.cpp's streams) and
//! for the lengths of dataset prompts. A count made here is an estimate unless the
//! tokenizer is the server's own, so records mark it as such.
//!
//! [`sim`] is the simulator's own tokenizer, also exported as a `tokenizer.json`.

pub use redline_base::sim_tokenizer as sim;

use std::path::Path;
use std::sync::{Arc, OnceLock};

use tiktoken_rs::CoreBPE;

/// A tokenizer that counts tokens in text.
#[derive(Clone)]
pub enum LocalTokenizer {
    /// The simulator's tokenizer: exact against `url: embedded`.
    Sim,
    /// An OpenAI BPE (the ranks ship inside the `tiktoken-rs` crate: no download),
    /// parsed at its first count: a run whose server reports usage never pays for it.
    Bpe(&'static LazyBpe),
    /// A Hugging Face `tokenizer.json`: the served model's own, so counts are exact.
    HuggingFace(Arc<HuggingFaceTokenizer>),
}

/// A BPE whose ranks are parsed when first used.
pub struct LazyBpe {
    name: &'static str,
    make: fn() -> anyhow::Result<CoreBPE>,
    cell: OnceLock<CoreBPE>,
}

impl LazyBpe {
    const fn new(name: &'static str, make: fn() -> anyhow::Result<CoreBPE>) -> LazyBpe {
        LazyBpe {
            name,
            make,
            cell: OnceLock::new(),
        }
    }

    fn get(&self) -> &CoreBPE {
        // The ranks are compiled into the binary; failing to parse them is a bug.
        self.cell
            .get_or_init(|| (self.make)().expect("bundled BPE ranks parse"))
    }
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
        static CL100K: LazyBpe = LazyBpe::new("cl100k_base", tiktoken_rs::cl100k_base);
        static O200K: LazyBpe = LazyBpe::new("o200k_base", tiktoken_rs::o200k_base);
        match name {
            "sim" => Ok(LocalTokenizer::Sim),
            "cl100k_base" => Ok(LocalTokenizer::Bpe(&CL100K)),
            "o200k_base" => Ok(LocalTokenizer::Bpe(&O200K)),
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
            LocalTokenizer::Bpe(bpe) => bpe.name,
            LocalTokenizer::HuggingFace(hf) => &hf.path,
        }
    }

    /// Tokens in `text`, in time linear in its length. BPE merging is quadratic in
    /// the length of a piece without whitespace (1 MiB of `a` takes half a second in
    /// cl100k_base), and a server controls what it sends; so a long text is counted in
    /// parts of at most [`COUNT_PART_BYTES`], each cut just before a whitespace
    /// character. The pre-tokenizers split there anyway, so ordinary text counts
    /// exactly; only a run without whitespace longer than a part is cut, and miscounted
    /// by a token at most per cut.
    pub fn count(&self, text: &str) -> usize {
        parts(text, COUNT_PART_BYTES)
            .map(|part| self.count_part(part))
            .sum()
    }

    fn count_part(&self, text: &str) -> usize {
        match self {
            LocalTokenizer::Sim => crate::tokenizer::sim::count(text),
            LocalTokenizer::Bpe(bpe) => bpe.get().encode_ordinary(text).len(),
            // Without special tokens, like the BPEs: the text's own tokens. Encoding
            // fails only for a tokenizer.json that pads or truncates to an impossible
            // length; counting such text as no tokens would hide it, so the simulator's
            // word count stands in.
            LocalTokenizer::HuggingFace(hf) => hf
                .tokenizer
                .encode(text, false)
                .map_or_else(|_| crate::tokenizer::sim::count(text), |e| e.len()),
        }
    }
}

/// How a client counts answers: with which tokenizer, when, and up to what size.
#[derive(Debug, Clone)]
pub struct TokenCounting {
    pub tokenizer: LocalTokenizer,
    /// The spec named the tokenizer (the model's own, say), rather than it being the
    /// default guess: its counts are marked `tokenizer`, not `estimated`.
    pub named: bool,
    /// Count every answer, also when the server reports usage (to check a tokenizer
    /// against the server); else only answers the server gives no count for.
    pub always: bool,
    /// Longest answer counted: past it the count is skipped, and the record says so.
    pub max_bytes: usize,
}

/// Default of `limits.max_local_count_bytes`: four times the longest answers models
/// give (128k tokens of about 4 bytes each); counting it takes ~0.1 s of one core.
pub const DEFAULT_MAX_COUNT_BYTES: usize = 2 << 20;

impl TokenCounting {
    /// Counts the text, off the async worker threads when it is long enough to hold
    /// one up; `None` when it is over [`TokenCounting::max_bytes`]. The text comes back.
    pub async fn count(&self, text: String) -> (Option<usize>, String) {
        /// Texts up to this size cost at most ~0.5 ms to count, even hostile ones.
        const INLINE_BYTES: usize = 4 << 10;
        if text.len() > self.max_bytes {
            return (None, text);
        }
        if text.len() <= INLINE_BYTES {
            return (Some(self.tokenizer.count(&text)), text);
        }
        let tokenizer = self.tokenizer.clone();
        match tokio::task::spawn_blocking(move || (tokenizer.count(&text), text)).await {
            Ok((n, text)) => (Some(n), text),
            // The counting thread cannot panic on text; if it did, say "not counted".
            Err(_) => (None, String::new()),
        }
    }
}

/// The longest part [`LocalTokenizer::count`] hands a tokenizer at once.
pub const COUNT_PART_BYTES: usize = 16 << 10;

/// `text` in parts of at most `limit` bytes, each (but the last) ending just before a
/// whitespace character when the part has one, else at a character boundary.
fn parts(text: &str, limit: usize) -> impl Iterator<Item = &str> {
    let mut rest = text;
    std::iter::from_fn(move || {
        if rest.is_empty() {
            return None;
        }
        if rest.len() <= limit {
            return Some(std::mem::take(&mut rest));
        }
        let mut end = limit;
        while !rest.is_char_boundary(end) {
            end -= 1;
        }
        let cut = rest[..end]
            .rfind(char::is_whitespace)
            .filter(|&at| at > 0)
            .unwrap_or(end);
        let (part, tail) = rest.split_at(cut);
        rest = tail;
        Some(part)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn long_texts_count_in_parts_exactly_and_in_linear_time() {
        let cl100k = LocalTokenizer::by_name("cl100k_base").unwrap();
        // Ordinary text: the parts (cut before whitespace) add up to the whole count.
        let prose: String = (0..20_000)
            .map(|i| format!(" word{} and, more.", i % 97))
            .collect();
        assert!(prose.len() > 10 * COUNT_PART_BYTES);
        let whole = cl100k.count_part(&prose);
        assert_eq!(cl100k.count(&prose), whole);
        // Every part is within the limit and they join back to the text.
        let pieces: Vec<&str> = parts(&prose, COUNT_PART_BYTES).collect();
        assert!(pieces.iter().all(|p| p.len() <= COUNT_PART_BYTES));
        assert_eq!(pieces.concat(), prose);
        // Multi-byte characters are never split.
        let accents = "é".repeat(COUNT_PART_BYTES);
        assert_eq!(
            parts(&accents, COUNT_PART_BYTES).collect::<String>(),
            accents
        );
        // A hostile run without whitespace is cut into parts of bounded cost (whole,
        // its cost is quadratic), and the count stays within a token per cut.
        let run = "a".repeat(4 * COUNT_PART_BYTES);
        assert_eq!(parts(&run, COUNT_PART_BYTES).count(), 4);
        let counted = cl100k.count(&run);
        let exact = cl100k.count_part(&run);
        assert!(counted.abs_diff(exact) <= 4, "{counted} vs {exact}");
    }

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
        let long: Vec<&str> = crate::tokenizer::sim::WORDS
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
            crate::tokenizer::sim::huggingface_tokenizer_json().to_string(),
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
