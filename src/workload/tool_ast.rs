//! Tool calls graded by the BFCL AST rule (the Berkeley Function-Calling
//! Leaderboard's `ast_checker`, Python semantics): the number of calls, each call's
//! function, its required parameters, each value's type against the tool's schema,
//! and each value among the possible answers, strings compared as BFCL standardises
//! them. Parallel calls match in any order, greedily as BFCL does; a line that
//! expects no call (irrelevance) is correct only without one.
//!
//! The verdicts are BFCL's own on the same answers: `scripts/bfcl_check.py` runs its
//! checker beside this one in CI.

use serde_json::{Map, Value};

use crate::record::GradeBucket;

/// What a line expects of the answer's tool calls.
#[derive(Debug, Clone, PartialEq)]
pub enum ExpectedCalls {
    /// These calls, in any order: each a function and its parameters' possible
    /// values (`""` among them: the parameter may be left out).
    Calls(Vec<ExpectedCall>),
    /// No call at all (BFCL's irrelevance).
    None,
    /// At least one call, whichever (BFCL's live relevance).
    Any,
}

#[derive(Debug, Clone, PartialEq)]
pub struct ExpectedCall {
    pub name: String,
    pub params: Map<String, Value>,
}

/// A tool's declared parameters, from the tools the line offers.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolSchema {
    pub name: String,
    pub properties: Map<String, Value>,
    pub required: Vec<String>,
}

/// A call as the answer made it.
#[derive(Debug, Clone, Copy)]
pub struct MadeCall<'a> {
    pub name: &'a str,
    pub arguments: &'a str,
}

/// Why a check failed: its bucket and BFCL's kind of message.
pub type Miss = (GradeBucket, String);

impl ExpectedCalls {
    /// A line's `expected` in BFCL's `ground_truth` shape: a list of
    /// `{function: {param: [possible values]}}`; an empty list expects no call, the
    /// string `"any_call"` some call.
    pub fn from_line(expected: &Value) -> Result<ExpectedCalls, String> {
        let shape = "\"expected\" must be a list of {\"function\": {\"param\": [possible values]}} (BFCL's ground_truth), or \"any_call\"";
        if expected.as_str() == Some("any_call") {
            return Ok(ExpectedCalls::Any);
        }
        let calls = expected.as_array().ok_or(shape)?;
        if calls.is_empty() {
            return Ok(ExpectedCalls::None);
        }
        let call = |c: &Value| -> Option<ExpectedCall> {
            let (name, params) = c.as_object().filter(|o| o.len() == 1)?.iter().next()?;
            let params = params.as_object()?;
            params.values().all(Value::is_array).then(|| ExpectedCall {
                name: name.clone(),
                params: params.clone(),
            })
        };
        calls
            .iter()
            .map(|c| call(c).ok_or(shape))
            .collect::<Result<_, _>>()
            .map(ExpectedCalls::Calls)
            .map_err(str::to_owned)
    }
}

/// The tools of a line's `tools` list (chat's `{type: function, function: {…}}`
/// shape, or the function alone).
pub fn tool_schemas(tools: &Value) -> Vec<ToolSchema> {
    let list = tools.as_array().map(Vec::as_slice).unwrap_or_default();
    list.iter()
        .map(|tool| tool.get("function").unwrap_or(tool))
        .filter_map(|function| {
            let parameters = function.get("parameters");
            let of = |key: &str| parameters.and_then(|p| p.get(key));
            Some(ToolSchema {
                name: function.get("name")?.as_str()?.to_owned(),
                properties: of("properties")
                    .and_then(Value::as_object)
                    .cloned()
                    .unwrap_or_default(),
                required: of("required")
                    .and_then(Value::as_array)
                    .into_iter()
                    .flatten()
                    .filter_map(|r| r.as_str().map(str::to_owned))
                    .collect(),
            })
        })
        .collect()
}

/// Grades the answer's calls: `Ok` when correct, else the first miss.
pub fn check(
    expected: &ExpectedCalls,
    tools: &[ToolSchema],
    made: &[MadeCall<'_>],
) -> Result<(), Miss> {
    let wanted = match expected {
        ExpectedCalls::None if made.is_empty() => return Ok(()),
        ExpectedCalls::None => {
            let names: Vec<&str> = made.iter().map(|c| c.name).collect();
            let why = format!("called {} where no call was due", names.join(", "));
            return Err((GradeBucket::ShouldNotHaveCalled, why));
        }
        ExpectedCalls::Any if made.is_empty() => {
            return Err((GradeBucket::WrongCount, "no call where one was due".into()));
        }
        ExpectedCalls::Any => return Ok(()),
        ExpectedCalls::Calls(calls) => calls,
    };
    if made.is_empty() {
        return Err((GradeBucket::Unparsed, "no tool call in the answer".into()));
    }
    let parsed = made
        .iter()
        .map(|call| parse_arguments(call).map(|args| (call.name, args)))
        .collect::<Result<Vec<_>, Miss>>()?;
    if parsed.len() != wanted.len() {
        let why = format!("{} calls, not {}", parsed.len(), wanted.len());
        return Err((GradeBucket::WrongCount, why));
    }
    match_in_any_order(wanted, tools, &parsed)
}

fn parse_arguments(call: &MadeCall<'_>) -> Result<Map<String, Value>, Miss> {
    // An empty string is what a call without arguments streams.
    let text = if call.arguments.trim().is_empty() {
        "{}"
    } else {
        call.arguments
    };
    match serde_json::from_str(text) {
        Ok(Value::Object(args)) => Ok(args),
        Ok(other) => {
            let why = format!("{}'s arguments are not an object: {other}", call.name);
            Err((GradeBucket::Unparsed, crate::record::cut_to(&why, 200)))
        }
        Err(e) => {
            let why = format!("{}'s arguments are not JSON: {e}", call.name);
            Err((GradeBucket::Unparsed, why))
        }
    }
}

/// BFCL's no-order match: each expected call in turn takes the first call not yet
/// taken that passes it; an expected call that none passes fails the answer with
/// the last miss.
fn match_in_any_order(
    wanted: &[ExpectedCall],
    tools: &[ToolSchema],
    made: &[(&str, Map<String, Value>)],
) -> Result<(), Miss> {
    let mut taken = vec![false; made.len()];
    for expected in wanted {
        let tool = tools.iter().find(|t| t.name == expected.name);
        let mut last_miss = None;
        let found = made.iter().enumerate().position(|(i, (name, args))| {
            if taken[i] {
                return false;
            }
            match check_call(expected, tool, name, args) {
                Ok(()) => true,
                Err(miss) => {
                    last_miss = Some(miss);
                    false
                }
            }
        });
        match (found, last_miss) {
            (Some(i), _) => taken[i] = true,
            (None, miss) => {
                return Err(miss.unwrap_or((GradeBucket::WrongCount, "no call left".into())));
            }
        }
    }
    Ok(())
}

/// BFCL's `simple_function_checker` for Python.
fn check_call(
    expected: &ExpectedCall,
    tool: Option<&ToolSchema>,
    name: &str,
    args: &Map<String, Value>,
) -> Result<(), Miss> {
    if name != expected.name {
        let why = format!("called {name}, not {}", expected.name);
        return Err((GradeBucket::WrongTool, why));
    }
    let empty = ToolSchema {
        name: name.to_owned(),
        properties: Map::new(),
        required: Vec::new(),
    };
    let tool = tool.unwrap_or(&empty);
    if let Some(missing) = tool.required.iter().find(|p| !args.contains_key(*p)) {
        let why = format!("missing required parameter {missing}");
        return Err((GradeBucket::MissingParam, why));
    }
    for (param, value) in args {
        let (Some(declared), Some(possible)) = (
            tool.properties.get(param),
            expected.params.get(param).and_then(Value::as_array),
        ) else {
            return Err((
                GradeBucket::UnexpectedParam,
                format!("unexpected parameter {param}"),
            ));
        };
        check_value(param, value, declared, possible)?;
    }
    let left_out = expected.params.iter().find(|(param, possible)| {
        !args.contains_key(*param) && !possible.as_array().is_some_and(|p| p.contains(&"".into()))
    });
    if let Some((param, _)) = left_out {
        let why = format!("parameter {param} left out, and it has no default");
        return Err((GradeBucket::MissingParam, why));
    }
    Ok(())
}

/// Python's types of JSON values, as `json.loads` makes them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum PyType {
    Str,
    Int,
    Float,
    Bool,
    List,
    Dict,
    Null,
}

fn py_type(value: &Value) -> PyType {
    match value {
        Value::String(_) => PyType::Str,
        Value::Number(n) if n.is_f64() => PyType::Float,
        Value::Number(_) => PyType::Int,
        Value::Bool(_) => PyType::Bool,
        Value::Array(_) => PyType::List,
        Value::Object(_) => PyType::Dict,
        Value::Null => PyType::Null,
    }
}

/// A JSON Schema type as BFCL's Python mapping reads it (`any` and the unknown are
/// strings, as BFCL's tool conversion writes them).
fn declared_type(schema: &Value) -> PyType {
    match schema.get("type").and_then(Value::as_str) {
        Some("integer") => PyType::Int,
        Some("number" | "float") => PyType::Float,
        Some("boolean") => PyType::Bool,
        Some("array" | "tuple") => PyType::List,
        Some("object" | "dict") => PyType::Dict,
        _ => PyType::Str,
    }
}

/// The type of the first possible answer that is not the "may be left out" marker.
fn possible_type(possible: &[Value]) -> Option<PyType> {
    possible
        .iter()
        .find(|v| v.as_str() != Some(""))
        .map(py_type)
}

fn check_value(
    param: &str,
    value: &Value,
    declared: &Value,
    possible: &[Value],
) -> Result<(), Miss> {
    let expected_type = declared_type(declared);
    let nested = (expected_type == PyType::List)
        .then(|| declared.get("items").map_or(PyType::Str, declared_type));
    // Python passes an int where a float is due.
    let value = match (expected_type, value) {
        (PyType::Float, Value::Number(n)) if !n.is_f64() => n
            .as_f64()
            .and_then(serde_json::Number::from_f64)
            .map_or(value.clone(), Value::Number),
        _ => value.clone(),
    };
    let is_variable = type_check(param, &value, possible, expected_type, nested)?;
    if !is_variable {
        match (expected_type, nested) {
            (PyType::Dict, _) => return dict_check(param, &value, possible),
            (PyType::List, Some(PyType::Dict)) => {
                return list_of_dicts_check(param, &value, possible);
            }
            (PyType::Str, _) => return string_check(param, &value, possible),
            (PyType::List, _) => return list_check(param, &value, possible),
            _ => {}
        }
    }
    match possible.iter().any(|p| py_eq(&value, p)) {
        true => Ok(()),
        false => Err(value_miss(param, &value)),
    }
}

/// BFCL's `type_checker`: `Ok(true)` when the value has the possible answers' type
/// rather than the declared one (BFCL's "variable": a name passed for a value).
fn type_check(
    param: &str,
    value: &Value,
    possible: &[Value],
    expected: PyType,
    nested: Option<PyType>,
) -> Result<bool, Miss> {
    let answers_type = possible_type(possible);
    let is_variable = answers_type.is_some_and(|t| t != expected);
    let got = py_type(value);
    if got == expected {
        let Some(inner) = nested else {
            return Ok(is_variable);
        };
        let items = value.as_array().map(Vec::as_slice).unwrap_or_default();
        let fits = |answer: &Value| match answer {
            Value::Array(allowed) => items
                .iter()
                .all(|item| type_check(param, item, allowed, inner, None).is_ok()),
            _ => true,
        };
        if possible.iter().any(fits) {
            return Ok(is_variable);
        }
        let why = format!("{param}'s items are not all of type {inner:?}");
        return Err((GradeBucket::ParamType, why));
    }
    if answers_type == Some(got) {
        return Ok(true);
    }
    let why = format!("{param} is {got:?}, not {expected:?}");
    Err((GradeBucket::ParamType, why))
}

/// BFCL's `standardize_string`: case, spaces and `,./-_*^` do not count, and
/// single quotes are double.
fn standardize(text: &str) -> String {
    text.chars()
        .filter(|c| !" ,./-_*^".contains(*c))
        .collect::<String>()
        .to_lowercase()
        .replace('\'', "\"")
}

/// A value with its strings standardised (one level: BFCL's checkers go no deeper).
fn standardized(value: &Value) -> Value {
    match value {
        Value::String(s) => Value::String(standardize(s)),
        other => other.clone(),
    }
}

fn string_check(param: &str, value: &Value, possible: &[Value]) -> Result<(), Miss> {
    let got = standardize(value.as_str().unwrap_or_default());
    let allowed = possible.iter().filter_map(Value::as_str).map(standardize);
    match allowed.into_iter().any(|a| a == got) {
        true => Ok(()),
        false => Err(value_miss(param, value)),
    }
}

fn list_check(param: &str, value: &Value, possible: &[Value]) -> Result<(), Miss> {
    let got: Vec<Value> = value
        .as_array()
        .into_iter()
        .flatten()
        .map(standardized)
        .collect();
    // A possible answer that is a string is, to BFCL's loop, the list of its
    // characters: the "may be left out" marker "" is the empty list.
    let as_list = |answer: &Value| -> Option<Vec<Value>> {
        match answer {
            Value::Array(items) => Some(items.iter().map(standardized).collect()),
            Value::String(s) => Some(
                s.chars()
                    .map(|c| Value::String(standardize(&c.to_string())))
                    .collect(),
            ),
            _ => None,
        }
    };
    let matches = possible.iter().filter_map(as_list).any(|allowed| {
        allowed.len() == got.len() && allowed.iter().zip(&got).all(|(a, g)| py_eq(a, g))
    });
    match matches {
        true => Ok(()),
        false => Err(value_miss(param, value)),
    }
}

/// BFCL's `dict_checker`: some possible dict allows every key and value given, and
/// every key it needs is given.
fn dict_check(param: &str, value: &Value, possible: &[Value]) -> Result<(), Miss> {
    let given = value.as_object().cloned().unwrap_or_default();
    let fits = |answer: &Map<String, Value>| {
        let values_allowed = given.iter().all(|(key, v)| {
            let allowed = answer.get(key).and_then(Value::as_array);
            allowed.is_some_and(|a| a.iter().any(|x| py_eq(&standardized(v), &standardized(x))))
        });
        let needed_given = answer.iter().all(|(key, allowed)| {
            given.contains_key(key) || allowed.as_array().is_some_and(|a| a.contains(&"".into()))
        });
        values_allowed && needed_given
    };
    match possible.iter().filter_map(Value::as_object).any(fits) {
        true => Ok(()),
        false => Err(value_miss(param, value)),
    }
}

/// BFCL's `list_dict_checker`: the dicts, in order, against some possible list.
fn list_of_dicts_check(param: &str, value: &Value, possible: &[Value]) -> Result<(), Miss> {
    let given = value.as_array().map(Vec::as_slice).unwrap_or_default();
    let fits = |answer: &Value| match answer {
        Value::Array(dicts) => {
            dicts.len() == given.len()
                && given
                    .iter()
                    .zip(dicts)
                    .all(|(g, d)| dict_check(param, g, std::slice::from_ref(d)).is_ok())
        }
        Value::String(s) => s.is_empty() && given.is_empty(),
        _ => false,
    };
    match possible.iter().any(fits) {
        true => Ok(()),
        false => Err(value_miss(param, value)),
    }
}

fn value_miss(param: &str, value: &Value) -> Miss {
    let why = format!("{param} = {value} is none of the possible answers");
    (GradeBucket::ParamValue, crate::record::cut_to(&why, 200))
}

/// Python's `==` on values `json.loads` made: numbers and booleans by value (`1 ==
/// 1.0 == True`), lists and dicts element by element.
fn py_eq(a: &Value, b: &Value) -> bool {
    let number = |v: &Value| match v {
        Value::Number(n) => n.as_f64(),
        Value::Bool(b) => Some(f64::from(u8::from(*b))),
        _ => None,
    };
    match (a, b) {
        (Value::Array(x), Value::Array(y)) => {
            x.len() == y.len() && x.iter().zip(y).all(|(a, b)| py_eq(a, b))
        }
        (Value::Object(x), Value::Object(y)) => {
            x.len() == y.len() && x.iter().all(|(k, v)| y.get(k).is_some_and(|w| py_eq(v, w)))
        }
        (Value::String(x), Value::String(y)) => x == y,
        (Value::Null, Value::Null) => true,
        _ => match (number(a), number(b)) {
            (Some(x), Some(y)) => x == y,
            _ => false,
        },
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn tools() -> Vec<ToolSchema> {
        tool_schemas(&json!([
            {"type": "function", "function": {"name": "area", "parameters": {"type": "object",
                "properties": {"base": {"type": "number"}, "unit": {"type": "string"},
                    "sides": {"type": "array", "items": {"type": "integer"}}},
                "required": ["base"]}}},
            {"type": "function", "function": {"name": "city", "parameters": {"type": "object",
                "properties": {"name": {"type": "string"}}, "required": ["name"]}}},
        ]))
    }

    fn grade(expected: Value, calls: &[(&str, &str)]) -> Result<(), GradeBucket> {
        let made: Vec<MadeCall> = calls
            .iter()
            .map(|(name, arguments)| MadeCall { name, arguments })
            .collect();
        let expected = ExpectedCalls::from_line(&expected).unwrap();
        check(&expected, &tools(), &made).map_err(|(bucket, _)| bucket)
    }

    #[test]
    fn values_follow_bfcls_python_rules() {
        let want = json!([{"area": {"base": [10.0], "unit": ["square meters", ""]}}]);
        // An int where a float is due; strings without case, spaces or punctuation.
        assert_eq!(
            grade(
                want.clone(),
                &[("area", r#"{"base": 10, "unit": "Square-Meters."}"#)]
            ),
            Ok(())
        );
        assert_eq!(
            grade(want.clone(), &[("area", r#"{"base": 10.0}"#)]),
            Ok(()),
            "optional"
        );
        assert_eq!(
            grade(want.clone(), &[("area", r#"{"base": "10"}"#)]),
            Err(GradeBucket::ParamType)
        );
        assert_eq!(
            grade(want.clone(), &[("area", r#"{"base": 11}"#)]),
            Err(GradeBucket::ParamValue)
        );
        assert_eq!(
            grade(want.clone(), &[("area", r#"{"unit": "m"}"#)]),
            Err(GradeBucket::MissingParam)
        );
        assert_eq!(
            grade(want.clone(), &[("area", r#"{"base": 10, "x": 1}"#)]),
            Err(GradeBucket::UnexpectedParam)
        );
        assert_eq!(
            grade(want.clone(), &[("city", r#"{"name": "x"}"#)]),
            Err(GradeBucket::WrongTool)
        );
        assert_eq!(
            grade(want.clone(), &[("area", r#"{"base": 10"#)]),
            Err(GradeBucket::Unparsed)
        );
        assert_eq!(grade(want, &[]), Err(GradeBucket::Unparsed));
        let no_default = json!([{"area": {"base": [1.5], "unit": ["m"]}}]);
        assert_eq!(
            grade(no_default, &[("area", r#"{"base": 1.5}"#)]),
            Err(GradeBucket::MissingParam)
        );
        let list = json!([{"area": {"base": [1.0], "sides": [[3, 4]]}}]);
        assert_eq!(
            grade(list.clone(), &[("area", r#"{"base": 1, "sides": [3, 4]}"#)]),
            Ok(())
        );
        assert_eq!(
            grade(list, &[("area", r#"{"base": 1, "sides": [4, 3]}"#)]),
            Err(GradeBucket::ParamValue)
        );
    }

    #[test]
    fn parallel_calls_match_in_any_order_and_irrelevance_wants_none() {
        let want = json!([{"city": {"name": ["Oslo"]}}, {"city": {"name": ["Bergen"]}}]);
        let (oslo, bergen) = (
            ("city", r#"{"name": "oslo"}"#),
            ("city", r#"{"name": "Bergen"}"#),
        );
        assert_eq!(grade(want.clone(), &[bergen, oslo]), Ok(()));
        assert_eq!(grade(want.clone(), &[oslo]), Err(GradeBucket::WrongCount));
        assert_eq!(
            grade(want.clone(), &[oslo, oslo]),
            Err(GradeBucket::ParamValue)
        );
        assert_eq!(grade(json!([]), &[]), Ok(()));
        assert_eq!(
            grade(json!([]), &[oslo]),
            Err(GradeBucket::ShouldNotHaveCalled)
        );
        assert_eq!(grade(json!("any_call"), &[oslo]), Ok(()));
        assert_eq!(grade(json!("any_call"), &[]), Err(GradeBucket::WrongCount));
    }

    #[test]
    fn expectations_not_in_bfcls_shape_are_refused() {
        for bad in [
            json!({"f": 1}),
            json!([{"f": {"x": 1}}]),
            json!([{"f": {}, "g": {}}]),
            json!(3),
        ] {
            assert!(ExpectedCalls::from_line(&bad).is_err(), "{bad}");
        }
    }
}
