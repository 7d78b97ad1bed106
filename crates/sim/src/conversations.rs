//! The Responses API's stored conversations: what `previous_response_id` names. Each
//! answer stored is its whole conversation (the history it was asked with, its input,
//! its output), so the next turn's prompt begins with the same tokens and meets the
//! prefix cache, as a server's own history would. Bounded: the oldest is forgotten
//! first, and a forgotten id is answered as an unknown one.

use std::collections::{HashMap, VecDeque};
use std::sync::Mutex;

use super::openai::Message;

/// How many conversations are kept before the oldest is forgotten.
pub const KEPT: usize = 4096;

/// Conversations by response id.
#[derive(Debug, Default)]
pub struct Conversations {
    inner: Mutex<Kept>,
}

#[derive(Debug, Default)]
struct Kept {
    by_id: HashMap<String, Vec<Message>>,
    order: VecDeque<String>,
}

impl Conversations {
    /// Keeps `messages` as the conversation of response `id`.
    pub fn keep(&self, id: String, messages: Vec<Message>) {
        let mut kept = self.inner.lock().expect("no panics while held");
        if kept.by_id.insert(id.clone(), messages).is_none() {
            kept.order.push_back(id);
        }
        while kept.order.len() > KEPT {
            if let Some(oldest) = kept.order.pop_front() {
                kept.by_id.remove(&oldest);
            }
        }
    }

    /// The conversation of response `id`, if it is still kept.
    pub fn get(&self, id: &str) -> Option<Vec<Message>> {
        let kept = self.inner.lock().expect("no panics while held");
        kept.by_id.get(id).cloned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::openai::Content;

    fn said(text: &str) -> Vec<Message> {
        vec![Message {
            role: "user".into(),
            content: Some(Content::Text(text.into())),
            tool_calls: None,
        }]
    }

    #[test]
    fn the_oldest_is_forgotten_first() {
        let kept = Conversations::default();
        for i in 0..=KEPT {
            kept.keep(format!("resp_{i}"), said("hi"));
        }
        assert!(
            kept.get("resp_0").is_none(),
            "over the bound, the first goes"
        );
        assert!(kept.get("resp_1").is_some());
        assert!(kept.get(&format!("resp_{KEPT}")).is_some());
    }
}
