//! The simulator's tokenizer: fast, allocation-light, deterministic.
//!
//! It is not a BPE. It splits text into pieces the way BPE vocabularies mostly do for
//! English — a word with its leading space is one piece, long words are cut into pieces
//! of at most [`MAX_PIECE_BYTES`], every other character is a piece of its own — and
//! gives each piece a stable 32-bit id (FNV-1a of its bytes). Two properties matter:
//! the words the simulator generates are one token each (so requested output lengths are
//! exact), and re-tokenizing a generated answer yields the same ids (so a multi-turn
//! conversation's history hits the prefix cache, as it does on a real server).

/// The longest piece, in bytes, a single word is allowed before it is cut.
pub const MAX_PIECE_BYTES: usize = 8;

/// Common short words, each one token with its leading space: what the simulator
/// speaks and what synthetic prompts are made of, so their lengths are exact.
pub const WORDS: &[&str] = &[
    "the", "model", "answer", "system", "data", "request", "latency", "token", "cache", "server",
    "query", "vector", "search", "result", "agent", "tool", "memory", "context", "prompt",
    "stream", "batch", "queue", "time", "first", "second", "value", "number", "table", "graph",
    "node", "edge", "path", "route", "state", "step", "plan", "task", "load", "test", "rate",
    "level", "limit", "error", "retry", "signal", "metric", "trace", "span", "event", "record",
    "report", "review", "release", "deploy", "scale", "replica", "cluster", "region", "zone",
    "shard", "index", "passage", "chapter", "section", "summary", "detail", "example", "reason",
    "because", "which", "where", "when", "while", "after", "before", "during", "between", "across",
    "through", "under", "over", "about", "against", "without", "within", "simple", "clear", "fast",
    "slow", "steady", "stable", "robust", "careful", "precise", "honest", "useful", "small",
    "large", "early", "late", "recent", "common", "rare", "likely", "certain", "open", "closed",
    "warm", "cold", "light", "heavy", "quiet", "busy", "ready", "done", "and", "or", "but", "so",
    "then", "also", "still", "only", "often", "rarely", "always", "never", "perhaps", "indeed",
    "thus", "hence", "we", "you", "they", "it", "this", "that", "these", "those", "each", "every",
    "some", "many", "few", "most", "more", "less", "is", "are", "was", "were", "has", "have",
    "can", "will", "should", "must", "may", "might", "does", "makes", "keeps", "holds", "shows",
    "finds", "gives", "takes", "uses", "sends", "reads", "writes", "checks", "counts", "learns",
    "builds", "serves", "waits", "returns", "starts", "stops", "grows", "falls", "rises", "moves",
    "meets", "misses", "breaks", "fixes", "green", "blue", "amber", "red", "north", "south",
    "river", "bridge", "garden", "window", "harbor", "paper", "pencil", "engine", "market",
    "season", "morning", "evening",
];

/// The simulator's tokenizer as a Hugging Face `tokenizer.json`, for clients that
/// need a tokenizer on disk (GuideLLM, AIPerf, transformers, redline's own
/// `tokenizer: DIR`). A regex splits text into exactly the pieces [`Pieces`] does, so
/// counts agree with the simulator's; the vocabulary holds the simulator's words and
/// single ASCII characters, and any other piece is the unknown token — one token all
/// the same. That token is the word ` unk`, not a special `[UNK]`: clients build
/// prompts of N tokens by decoding N ids, and a special token would be dropped by some
/// (GuideLLM) and become three pieces for others (AIPerf), so prompts would not be the
/// length asked for. Ids are not the simulator's (it hashes pieces); counts match.
pub fn huggingface_tokenizer_json() -> serde_json::Value {
    let mut vocab = serde_json::Map::new();
    let mut add = |piece: String| {
        let id = vocab.len();
        vocab.entry(piece).or_insert_with(|| id.into());
    };
    add(UNKNOWN.into());
    for word in WORDS {
        add(format!(" {word}"));
        add((*word).to_owned());
    }
    for byte in (0x20u8..0x7f).chain([b'\n', b'\t']) {
        add(char::from(byte).to_string());
    }
    // A space binds to the word after it, up to MAX_PIECE_BYTES in all; a word without
    // one is cut every MAX_PIECE_BYTES; anything else is one character. `[\s\S]`
    // rather than a dot-all flag, which the Oniguruma and Rust regex engines spell
    // differently.
    let pattern = format!(
        " [A-Za-z0-9]{{1,{}}}|[A-Za-z0-9]{{1,{}}}|[\\s\\S]",
        MAX_PIECE_BYTES - 1,
        MAX_PIECE_BYTES
    );
    serde_json::json!({
        "version": "1.0",
        "truncation": null,
        "padding": null,
        "added_tokens": [],
        "normalizer": null,
        "pre_tokenizer": {
            "type": "Split",
            "pattern": { "Regex": pattern },
            "behavior": "Isolated",
            "invert": false
        },
        "post_processor": null,
        "decoder": { "type": "Fuse" },
        "model": { "type": "WordLevel", "vocab": vocab, "unk_token": UNKNOWN }
    })
}

/// The exported tokenizer's unknown token: a word, so it decodes to one token.
const UNKNOWN: &str = " unk";

/// Token ids of `text`.
pub fn encode(text: &str) -> Vec<u32> {
    Pieces::new(text).map(piece_id).collect()
}

/// Number of tokens in `text`, without allocating.
pub fn count(text: &str) -> usize {
    Pieces::new(text).count()
}

/// The id of one piece: FNV-1a over its bytes.
pub fn piece_id(piece: &str) -> u32 {
    crate::seed::fnv32(piece.as_bytes())
}

/// Iterator over the pieces of a text.
pub struct Pieces<'a> {
    rest: &'a str,
}

impl<'a> Pieces<'a> {
    pub fn new(text: &'a str) -> Self {
        Pieces { rest: text }
    }
}

impl<'a> Iterator for Pieces<'a> {
    type Item = &'a str;

    fn next(&mut self) -> Option<&'a str> {
        let bytes = self.rest.as_bytes();
        let first = *bytes.first()?;
        // A single space binds to the word after it, as in GPT-style vocabularies.
        let word_start = usize::from(first == b' ' && bytes.get(1).is_some_and(is_word_byte));
        let end = if is_word_byte(&bytes[word_start]) {
            let mut end = word_start;
            while end < bytes.len() && is_word_byte(&bytes[end]) && end < MAX_PIECE_BYTES {
                end += 1;
            }
            end
        } else {
            // One character (which may be several bytes of UTF-8).
            self.rest.chars().next().map_or(1, char::len_utf8)
        };
        let (piece, rest) = self.rest.split_at(end);
        self.rest = rest;
        Some(piece)
    }
}

fn is_word_byte(byte: &u8) -> bool {
    byte.is_ascii_alphanumeric()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn splits_words_with_their_leading_space() {
        let pieces: Vec<_> = Pieces::new("Hello world, it's 2026!").collect();
        assert_eq!(
            pieces,
            ["Hello", " world", ",", " it", "'", "s", " 2026", "!"]
        );
    }

    #[test]
    fn cuts_long_words_and_keeps_unicode_whole() {
        let pieces: Vec<_> = Pieces::new(" internationalisation é\n\n").collect();
        assert_eq!(
            pieces,
            [" interna", "tionalis", "ation", " ", "é", "\n", "\n"]
        );
        assert_eq!(count(" internationalisation é\n\n"), 7);
    }

    #[test]
    fn pieces_concatenate_back_to_the_text() {
        let text = "  A  b\tc — ünïcode and 1234567890123 ";
        assert_eq!(Pieces::new(text).collect::<String>(), text);
    }

    #[test]
    fn ids_are_stable_and_round_trip_through_text() {
        let generated = " the model answers quickly";
        let ids = encode(generated);
        assert_eq!(ids.len(), 4);
        assert_eq!(ids, encode(&Pieces::new(generated).collect::<String>()));
        assert_eq!(piece_id(" the"), piece_id(" the"));
        assert_ne!(piece_id(" the"), piece_id("the"));
    }

    proptest::proptest! {
        #[test]
        fn the_exported_tokenizer_json_counts_like_the_simulator(
            text in "[ a-zA-Z0-9,.!?'\n\t\u{e9}\u{2014}-]{0,200}"
        ) {
            let exported = exported_tokenizer();
            let encoding = exported.encode(text.as_str(), false).unwrap();
            proptest::prop_assert_eq!(encoding.len(), count(&text));
        }
    }

    fn exported_tokenizer() -> &'static tokenizers::Tokenizer {
        static EXPORTED: std::sync::OnceLock<tokenizers::Tokenizer> = std::sync::OnceLock::new();
        EXPORTED.get_or_init(|| {
            huggingface_tokenizer_json()
                .to_string()
                .parse()
                .expect("the exported tokenizer.json loads")
        })
    }

    #[test]
    fn the_exported_tokenizer_knows_the_simulators_words_and_decodes_back() {
        let exported = exported_tokenizer();
        let text = format!(" {}, {}.", WORDS[..20].join(" "), WORDS[20]);
        let text = text.as_str();
        let encoding = exported.encode(text, false).unwrap();
        assert_eq!(encoding.len(), count(text));
        assert!(
            !encoding.get_ids().contains(&0),
            "no unknown token in the simulator's words"
        );
        assert_eq!(exported.decode(encoding.get_ids(), false).unwrap(), text);
        // An unknown piece decodes to one token, so N decoded ids are N tokens.
        let unknown = exported.encode(" zqxjkv zqxjkvw", false).unwrap();
        assert_eq!(unknown.get_ids(), [0, 0]);
        assert_eq!(
            count(&exported.decode(unknown.get_ids(), false).unwrap()),
            2
        );
    }
}
