//! The order of a typed event stream (OpenAI's Responses, Anthropic's Messages): it
//! starts with one event, opens and closes items (or content blocks) by index,
//! sends deltas only to an open one, and ends with a terminal event after which
//! nothing comes. A server that breaks the order has sent an answer no client can
//! assemble: the request fails as `out_of_order`, naming what came.

use super::piece::DecodeError;

/// What a stream has said so far.
#[derive(Debug, Default)]
pub(super) struct EventOrder {
    started: bool,
    ended: bool,
    /// Indices of the items (blocks) open now.
    open: Vec<u64>,
    /// The index of each tool call's item, in the order they opened: a call's number
    /// in the answer.
    calls: Vec<u64>,
}

fn broken(what: String) -> DecodeError {
    DecodeError::Order(what)
}

impl EventOrder {
    /// Every event: none may follow the terminal one.
    pub fn check_live(&self, event: &str) -> Result<(), DecodeError> {
        match self.ended {
            true => Err(broken(format!("`{event}` after the stream's end"))),
            false => Ok(()),
        }
    }

    /// The stream's first event.
    pub fn start(&mut self, event: &str) -> Result<(), DecodeError> {
        self.check_live(event)?;
        if self.started {
            return Err(broken(format!("a second `{event}`")));
        }
        self.started = true;
        Ok(())
    }

    /// An event that belongs after the start.
    pub fn check_started(&self, event: &str) -> Result<(), DecodeError> {
        self.check_live(event)?;
        match self.started {
            true => Ok(()),
            false => Err(broken(format!("`{event}` before the stream's start"))),
        }
    }

    /// Opens item `index`; a tool call's gets the next call number, returned.
    pub fn open(
        &mut self,
        index: u64,
        tool: bool,
        event: &str,
    ) -> Result<Option<usize>, DecodeError> {
        self.check_started(event)?;
        if self.open.contains(&index) {
            return Err(broken(format!("`{event}` for item {index}, already open")));
        }
        self.open.push(index);
        Ok(tool.then(|| {
            self.calls.push(index);
            self.calls.len() - 1
        }))
    }

    /// An event for open item `index`: its call number, if it is a tool call.
    pub fn check_open(&self, index: u64, event: &str) -> Result<Option<usize>, DecodeError> {
        self.check_started(event)?;
        if !self.open.contains(&index) {
            return Err(broken(format!("`{event}` for item {index}, never started")));
        }
        Ok(self.calls.iter().rposition(|&i| i == index))
    }

    pub fn close(&mut self, index: u64, event: &str) -> Result<(), DecodeError> {
        self.check_open(index, event)?;
        self.open.retain(|&i| i != index);
        Ok(())
    }

    /// The terminal event; with `all_closed`, items still open break the order.
    pub fn end(&mut self, event: &str, all_closed: bool) -> Result<(), DecodeError> {
        self.check_started(event)?;
        if all_closed && !self.open.is_empty() {
            return Err(broken(format!(
                "`{event}` with items {:?} still open",
                self.open
            )));
        }
        self.ended = true;
        Ok(())
    }

    /// Whether the answer called a tool.
    pub fn called(&self) -> bool {
        !self.calls.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn deltas_go_only_to_open_items_and_nothing_follows_the_end() {
        let mut order = EventOrder::default();
        assert!(
            order.check_started("delta").is_err(),
            "nothing before the start"
        );
        order.start("start").unwrap();
        assert!(order.start("start").is_err(), "one start");
        assert!(order.check_open(0, "delta").is_err(), "never started");
        assert_eq!(order.open(0, false, "open").unwrap(), None);
        assert_eq!(order.open(1, true, "open").unwrap(), Some(0));
        assert!(order.open(1, true, "open").is_err(), "already open");
        assert_eq!(order.check_open(1, "delta").unwrap(), Some(0));
        order.close(0, "close").unwrap();
        assert!(order.check_open(0, "delta").is_err(), "closed");
        assert!(order.end("end", true).is_err(), "item 1 is still open");
        order.close(1, "close").unwrap();
        order.end("end", true).unwrap();
        assert!(order.called());
        let late = order.check_live("delta").unwrap_err().to_string();
        assert!(late.contains("after the stream's end"), "{late}");
    }
}
