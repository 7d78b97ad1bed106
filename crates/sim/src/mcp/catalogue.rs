//! What the simulator's MCP server offers: its tools (with their input and output
//! schemas), resources and prompts, and what each does when called. The tools run on
//! the tool tier ([`crate::tiers`]), so their latency and failures are the ones
//! `--tool-latency-ms` and `--tool-failure-rate` plant for every protocol.

use serde_json::{Value, json};

use crate::embed::embed;
use crate::tiers::Tiers;

/// A JSON-RPC error the server answers with: a code and a message.
#[derive(Debug, Clone, PartialEq)]
pub struct RpcError {
    pub code: i64,
    pub message: String,
}

impl RpcError {
    pub const INVALID_PARAMS: i64 = -32602;
    /// MCP's code for a resource that does not exist.
    pub const RESOURCE_NOT_FOUND: i64 = -32002;

    pub fn invalid_params(message: String) -> RpcError {
        RpcError {
            code: RpcError::INVALID_PARAMS,
            message,
        }
    }
}

/// The tools' names, in [`tools`]'s order: what a call is checked against without
/// building the catalogue's schemas for every call.
pub const TOOL_NAMES: [&str; 5] = ["echo", "add", "get_weather", "search_docs", "long_task"];

/// The tools, in the order `tools/list` pages through them.
pub fn tools() -> Vec<Value> {
    vec![
        json!({
            "name": "echo",
            "description": "Says the message back.",
            "inputSchema": {"type": "object", "properties": {"message": {"type": "string"}}, "required": ["message"]},
        }),
        json!({
            "name": "add",
            "description": "Adds two numbers.",
            "inputSchema": {"type": "object", "properties": {"a": {"type": "number"}, "b": {"type": "number"}}, "required": ["a", "b"]},
            "outputSchema": {"type": "object", "properties": {"sum": {"type": "number"}}, "required": ["sum"]},
        }),
        json!({
            "name": "get_weather",
            "description": "A forecast for a city, a day at a time (made up, the same for the same city).",
            "inputSchema": {"type": "object", "properties": {"city": {"type": "string"}, "days": {"type": "integer", "minimum": 1, "maximum": 7}}, "required": ["city"]},
        }),
        json!({
            "name": "search_docs",
            "description": "Searches the simulator's document corpus (the one its Qdrant API serves).",
            "inputSchema": {"type": "object", "properties": {"query": {"type": "string"}, "limit": {"type": "integer", "minimum": 1, "maximum": 20}}, "required": ["query"]},
            "outputSchema": {"type": "object", "properties": {"hits": {"type": "array", "items": {"type": "object", "properties": {"id": {"type": "integer"}, "score": {"type": "number"}}, "required": ["id", "score"]}}}, "required": ["hits"]},
        }),
        json!({
            "name": "long_task",
            "description": "Works through a number of steps, reporting progress after each when the caller asks for it.",
            "inputSchema": {"type": "object", "properties": {"steps": {"type": "integer", "minimum": 1, "maximum": 20}}},
        }),
    ]
}

/// Milliseconds each step of `long_task` takes.
pub const STEP_MS: u64 = 10;

/// What a tool answers: its result, unless it fails (then `isError` with the reason).
pub fn tool_result(name: &str, arguments: &Value, tiers: &Tiers) -> Value {
    let text = |t: String| json!({"content": [{"type": "text", "text": t}]});
    let failed = |why: String| json!({"content": [{"type": "text", "text": why}], "isError": true});
    let string = |key: &str| arguments.get(key).and_then(Value::as_str);
    let number = |key: &str| arguments.get(key).and_then(Value::as_f64);
    match name {
        "echo" => match string("message") {
            Some(message) => text(message.to_owned()),
            None => failed("`message` must be a string".into()),
        },
        "add" => match (number("a"), number("b")) {
            (Some(a), Some(b)) => {
                let mut result = text(format!("{}", a + b));
                result["structuredContent"] = json!({"sum": a + b});
                result
            }
            _ => failed("`a` and `b` must be numbers".into()),
        },
        "get_weather" => match string("city") {
            Some(city) => text(forecast(city, number("days").unwrap_or(1.0) as u64)),
            None => failed("`city` must be a string".into()),
        },
        "search_docs" => match string("query") {
            Some(query) => search(query, number("limit").unwrap_or(3.0) as usize, tiers),
            None => failed("`query` must be a string".into()),
        },
        "long_task" => text(format!("{} steps done", steps(arguments))),
        _ => failed(format!("no tool `{name}`")),
    }
}

/// `long_task`'s steps, 1 to 20.
pub fn steps(arguments: &Value) -> u64 {
    arguments
        .get("steps")
        .and_then(Value::as_u64)
        .unwrap_or(5)
        .clamp(1, 20)
}

fn forecast(city: &str, days: u64) -> String {
    const SKIES: [&str; 4] = ["sunny", "cloudy", "rain", "wind"];
    let seed = redline_base::seed::fnv64(city.as_bytes());
    (0..days.clamp(1, 7))
        .map(|day| {
            let draw = redline_base::seed::mix_seed(&[seed, day]);
            let sky = SKIES[(draw % 4) as usize];
            format!("{city}, day {}: {sky}, {} °C", day + 1, (draw >> 8) % 30)
        })
        .collect::<Vec<_>>()
        .join("\n")
}

fn search(query: &str, limit: usize, tiers: &Tiers) -> Value {
    let hits = tiers
        .corpus()
        .search(&embed(query, tiers.dim()), limit.clamp(1, 20));
    let lines: Vec<String> = hits
        .iter()
        .map(|(id, _)| format!("{id}: {}", tiers.corpus().documents[*id as usize].text))
        .collect();
    let structured: Vec<Value> = hits
        .iter()
        .map(|(id, score)| json!({"id": id, "score": score}))
        .collect();
    json!({
        "content": [{"type": "text", "text": lines.join("\n")}],
        "structuredContent": {"hits": structured},
    })
}

/// Documents of the corpus listed as resources (any document can be read).
const LISTED_DOCUMENTS: u64 = 5;

/// The resources, in the order `resources/list` pages through them.
pub fn resources() -> Vec<Value> {
    let mut list = vec![json!({
        "uri": "redline://about",
        "name": "about",
        "description": "What this server is.",
        "mimeType": "text/plain",
    })];
    list.extend((0..LISTED_DOCUMENTS).map(|id| {
        json!({
            "uri": format!("redline://corpus/{id}"),
            "name": format!("document {id}"),
            "mimeType": "text/plain",
        })
    }));
    list
}

/// `resources/read`: the text at `uri`.
pub fn read_resource(uri: &str, tiers: &Tiers) -> Result<Value, RpcError> {
    let text = match uri.strip_prefix("redline://corpus/") {
        None if uri == "redline://about" => {
            "redline's simulated MCP server: tools on the simulator's tool tier, its corpus as resources, prompts for a RAG answer.".to_owned()
        }
        Some(id) => match id.parse::<usize>().ok().and_then(|id| tiers.corpus().documents.get(id)) {
            Some(document) => document.text.clone(),
            None => return Err(not_found(uri)),
        },
        None => return Err(not_found(uri)),
    };
    Ok(json!({"contents": [{"uri": uri, "mimeType": "text/plain", "text": text}]}))
}

fn not_found(uri: &str) -> RpcError {
    RpcError {
        code: RpcError::RESOURCE_NOT_FOUND,
        message: format!("Resource not found: {uri}"),
    }
}

/// The prompts, with their arguments.
pub fn prompts() -> Vec<Value> {
    vec![
        json!({
            "name": "summarize",
            "description": "Asks for a summary of a text.",
            "arguments": [{"name": "text", "description": "The text to summarize.", "required": true}],
        }),
        json!({
            "name": "rag_answer",
            "description": "Asks a question over retrieved passages.",
            "arguments": [
                {"name": "question", "description": "The question.", "required": true},
                {"name": "passages", "description": "The passages to answer from.", "required": false},
            ],
        }),
    ]
}

/// `prompts/get`: the prompt's messages with its arguments filled in.
pub fn get_prompt(name: &str, arguments: &Value) -> Result<Value, RpcError> {
    let argument = |key: &str| arguments.get(key).and_then(Value::as_str);
    let text = match name {
        "summarize" => format!(
            "Summarize in one sentence:\n{}",
            argument("text").ok_or_else(|| missing("text"))?
        ),
        "rag_answer" => format!(
            "Answer from these passages only.\n{}\nQuestion: {}",
            argument("passages").unwrap_or(""),
            argument("question").ok_or_else(|| missing("question"))?
        ),
        _ => return Err(RpcError::invalid_params(format!("Unknown prompt: {name}"))),
    };
    Ok(json!({
        "description": format!("the `{name}` prompt"),
        "messages": [{"role": "user", "content": {"type": "text", "text": text}}],
    }))
}

fn missing(argument: &str) -> RpcError {
    RpcError::invalid_params(format!("Missing required argument: {argument}"))
}

/// One page of `items` from `cursor` (an offset, opaque to clients), with the cursor
/// of the next page when there is one.
pub fn page(
    items: Vec<Value>,
    cursor: Option<&str>,
    size: usize,
) -> Result<(Vec<Value>, Option<String>), RpcError> {
    let start = match cursor {
        None => 0,
        Some(c) => c
            .parse::<usize>()
            .ok()
            .filter(|s| *s <= items.len())
            .ok_or_else(|| RpcError::invalid_params(format!("Invalid cursor: {c}")))?,
    };
    let end = (start + size).min(items.len());
    let next = (end < items.len()).then(|| end.to_string());
    Ok((items[start..end].to_vec(), next))
}
