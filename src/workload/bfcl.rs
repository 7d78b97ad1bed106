//! The Berkeley Function-Calling Leaderboard's data (PyPI `bfcl-eval`, Apache-2.0)
//! read as a graded dataset: each question as chat messages, its functions as
//! OpenAI tools (BFCL's own conversion: its types as JSON Schema's, `.` in names as
//! `_`, which OpenAI-style APIs require), and its possible answers (or, for the
//! relevance categories, whether a call is due) as the `tool_ast` grader's
//! expectation. The data is read from a path, or from the installed package's
//! `data` directory, found by asking Python where `bfcl_eval` is: never downloaded.

use std::path::{Path, PathBuf};

use serde_json::{Map, Value, json};

/// The single-turn Python categories, whose answers BFCL's AST checker grades.
pub const CATEGORIES: [&str; 11] = [
    "simple_python",
    "multiple",
    "parallel",
    "parallel_multiple",
    "irrelevance",
    "live_simple",
    "live_multiple",
    "live_parallel",
    "live_parallel_multiple",
    "live_irrelevance",
    "live_relevance",
];

/// The question file of `file`: the path itself when it is one, else `file` names a
/// category of the installed `bfcl-eval`.
pub fn locate(file: &Path, resolved: &Path) -> Result<PathBuf, String> {
    let name = file.to_str().unwrap_or_default();
    if resolved.exists() || !CATEGORIES.contains(&name) {
        return Ok(resolved.to_owned());
    }
    let data = installed_data_dir()?;
    let path = data.join(format!("BFCL_v4_{name}.json"));
    match path.exists() {
        true => Ok(path),
        false => Err(format!(
            "the installed bfcl-eval has no {} (its data directory: {})",
            path.display(),
            data.display()
        )),
    }
}

/// `bfcl_eval/data` of the package Python would import (found, not imported).
fn installed_data_dir() -> Result<PathBuf, String> {
    let code = "import importlib.util as u; s = u.find_spec('bfcl_eval'); print(s.submodule_search_locations[0] if s else '')";
    let fix = "install it (`pip install --no-deps bfcl-eval`) or give the question file's path";
    let output = std::process::Command::new("python3")
        .args(["-c", code])
        .output()
        .map_err(|e| format!("cannot run python3 to find bfcl-eval ({e}): {fix}"))?;
    let dir = String::from_utf8_lossy(&output.stdout).trim().to_owned();
    if dir.is_empty() {
        return Err(format!("no installed bfcl-eval found by python3: {fix}"));
    }
    Ok(PathBuf::from(dir).join("data"))
}

/// The category a question file holds, by its name (`BFCL_v4_parallel.json`).
pub fn category_of(path: &Path) -> Result<&'static str, String> {
    let stem = path
        .file_stem()
        .and_then(|s| s.to_str())
        .unwrap_or_default();
    let name = stem
        .strip_prefix("BFCL_")
        .and_then(|rest| rest.split_once('_'))
        .map_or(stem, |(_version, name)| name);
    CATEGORIES.iter().find(|c| **c == name).copied().ok_or_else(|| {
        format!(
            "{}: not a BFCL question file of a single-turn Python category (BFCL_v4_<category>.json, with <category> one of {})",
            path.display(),
            CATEGORIES.join(", ")
        )
    })
}

/// A question's line number, and its dataset line or why it cannot be one.
pub type Line = (usize, Result<Value, String>);

/// The questions of a file as dataset lines (`messages`, `tools`, `expected`).
pub fn lines(path: &Path, text: &str) -> Result<Vec<Line>, String> {
    let category = category_of(path)?;
    let answers = match category {
        "irrelevance" | "live_irrelevance" | "live_relevance" => None,
        _ => Some(possible_answers(path)?),
    };
    let mut lines = Vec::new();
    for (n, line) in text
        .lines()
        .enumerate()
        .filter(|(_, l)| !l.trim().is_empty())
    {
        let question = serde_json::from_str::<Value>(line)
            .map_err(|e| format!("not valid JSON: {e}"))
            .and_then(|q| {
                let expected = match (&answers, category) {
                    (None, "live_relevance") => json!("any_call"),
                    (None, _) => json!([]),
                    (Some(answers), _) => expected_of(&q, answers)?,
                };
                line_of(&q, expected)
            });
        lines.push((n + 1, question));
    }
    Ok(lines)
}

/// The possible answers by question id, from `possible_answer/` beside the file.
fn possible_answers(path: &Path) -> Result<Map<String, Value>, String> {
    let file = path
        .parent()
        .unwrap_or(Path::new(""))
        .join("possible_answer")
        .join(path.file_name().unwrap_or_default());
    let text = std::fs::read_to_string(&file)
        .map_err(|e| format!("{}: cannot read the possible answers: {e}", file.display()))?;
    let mut answers = Map::new();
    for (n, line) in text
        .lines()
        .enumerate()
        .filter(|(_, l)| !l.trim().is_empty())
    {
        let value: Value = serde_json::from_str(line)
            .map_err(|e| format!("{}:{}: not valid JSON: {e}", file.display(), n + 1))?;
        if let (Some(id), Some(truth)) = (value["id"].as_str(), value.get("ground_truth")) {
            answers.insert(id.to_owned(), truth.clone());
        }
    }
    Ok(answers)
}

/// A question's expected calls: its ground truth, names as the tools were renamed.
fn expected_of(question: &Value, answers: &Map<String, Value>) -> Result<Value, String> {
    let id = question["id"].as_str().ok_or("no \"id\"")?;
    let truth = answers
        .get(id)
        .and_then(Value::as_array)
        .ok_or_else(|| format!("{id} has no possible answer"))?;
    let renamed = truth.iter().map(|call| match call {
        Value::Object(call) => Value::Object(
            call.iter()
                .map(|(name, params)| (openai_name(name), params.clone()))
                .collect(),
        ),
        other => other.clone(),
    });
    Ok(Value::Array(renamed.collect()))
}

fn line_of(question: &Value, expected: Value) -> Result<Value, String> {
    let turns = question["question"]
        .as_array()
        .ok_or("no \"question\" list")?;
    let [turn] = turns.as_slice() else {
        return Err(format!(
            "{} turns: only single-turn questions are graded",
            turns.len()
        ));
    };
    let functions = question["function"]
        .as_array()
        .ok_or("no \"function\" list")?;
    let tools: Vec<Value> = functions.iter().map(tool_of).collect::<Result<_, _>>()?;
    Ok(json!({"messages": turn, "tools": tools, "expected": expected}))
}

/// BFCL's `convert_to_tool` for OpenAI-style APIs.
fn tool_of(function: &Value) -> Result<Value, String> {
    let name = function["name"]
        .as_str()
        .ok_or("a function without a name")?;
    let mut parameters = function["parameters"].clone();
    let properties = parameters
        .get_mut("properties")
        .and_then(Value::as_object_mut)
        .map(std::mem::take)
        .unwrap_or_default();
    parameters["type"] = json!("object");
    parameters["properties"] = Value::Object(cast_types(properties));
    let mut tool = json!({"name": openai_name(name), "parameters": parameters});
    if let Some(description) = function.get("description") {
        tool["description"] = description.clone();
    }
    Ok(json!({"type": "function", "function": tool}))
}

fn openai_name(name: &str) -> String {
    name.replace('.', "_")
}

/// BFCL's Python types as JSON Schema's; a float keeps `format: float` and says so
/// in its description, as BFCL writes it.
fn cast_types(properties: Map<String, Value>) -> Map<String, Value> {
    properties
        .into_iter()
        .map(|(key, mut schema)| {
            let given = schema["type"].as_str().unwrap_or("string").to_owned();
            if given == "float" {
                schema["format"] = json!("float");
                let said = schema["description"].as_str().unwrap_or_default();
                schema["description"] = json!(format!("{said} This is a float type value."));
            }
            schema["type"] = json!(openapi_type(&given));
            if let Some(inner) = schema.get_mut("properties").and_then(Value::as_object_mut) {
                let cast = cast_types(std::mem::take(inner));
                *inner = cast;
            } else if let Some(items) = schema.get_mut("items") {
                cast_items(items);
            }
            (key, schema)
        })
        .collect()
}

fn cast_items(items: &mut Value) {
    let given = items["type"].as_str().unwrap_or("string").to_owned();
    items["type"] = json!(openapi_type(&given));
    if let Some(inner) = items.get_mut("properties").and_then(Value::as_object_mut) {
        let cast = cast_types(std::mem::take(inner));
        *inner = cast;
    } else if let Some(nested) = items.get_mut("items") {
        cast_items(nested);
    }
}

/// BFCL's `GORILLA_TO_OPENAPI`.
fn openapi_type(bfcl: &str) -> &'static str {
    match bfcl {
        "integer" | "byte" | "short" | "long" => "integer",
        "number" | "float" | "double" => "number",
        "boolean" | "bool" => "boolean",
        "array" | "list" | "tuple" | "ArrayList" | "Array" => "array",
        "dict" | "object" | "HashMap" => "object",
        _ => "string",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_question_becomes_messages_tools_and_its_possible_answers() {
        let q = json!({"id": "simple_python_2", "question": [[{"role": "user", "content": "hypot of 4 and 5"}]],
            "function": [{"name": "math.hypot", "description": "d", "parameters": {"type": "dict",
                "properties": {"x": {"type": "integer"}, "z": {"type": "float", "description": "z."},
                    "pts": {"type": "array", "items": {"type": "tuple"}}, "o": {"type": "dict", "properties": {"k": {"type": "any"}}}},
                "required": ["x"]}}]});
        let answers = json!({"simple_python_2": [{"math.hypot": {"x": [4], "z": ["", 0]}}]});
        let expected = expected_of(&q, answers.as_object().unwrap()).unwrap();
        let line = line_of(&q, expected).unwrap();
        assert_eq!(line["messages"][0]["content"], "hypot of 4 and 5");
        let function = &line["tools"][0]["function"];
        assert_eq!(function["name"], "math_hypot");
        assert_eq!(function["parameters"]["type"], "object");
        let props = &function["parameters"]["properties"];
        assert_eq!(
            (&props["z"]["type"], &props["z"]["format"]),
            (&json!("number"), &json!("float"))
        );
        assert_eq!(props["z"]["description"], "z. This is a float type value.");
        assert_eq!(props["pts"]["items"]["type"], "array");
        assert_eq!(props["o"]["properties"]["k"]["type"], "string");
        assert_eq!(
            line["expected"],
            json!([{"math_hypot": {"x": [4], "z": ["", 0]}}])
        );
    }

    #[test]
    fn categories_come_from_the_file_name() {
        assert_eq!(
            category_of(Path::new("d/BFCL_v4_parallel_multiple.json")),
            Ok("parallel_multiple")
        );
        assert_eq!(
            category_of(Path::new("BFCL_v3_live_simple.json")),
            Ok("live_simple")
        );
        let err = category_of(Path::new("BFCL_v4_multi_turn_base.json")).unwrap_err();
        assert!(err.contains("single-turn Python"), "{err}");
    }
}
