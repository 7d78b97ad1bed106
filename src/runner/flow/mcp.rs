//! MCP in flows: a tool step whose service is `api: mcp` runs the model's tool calls
//! as `tools/call`; an `mcp` step makes one direct call; a chat step's
//! `tools: { from }` offers the tools the service lists when the run starts. Sessions
//! are pooled per step, as an agent server keeps its MCP clients open across the
//! conversations it serves.

use super::*;
use crate::client::mcp::{self, McpTarget};
use crate::scenario::flow::{McpArgs, McpStepOp, McpStepPlan};
use crate::workload::mcp::{McpCall, leaf_mut};

/// A target on `service` (an `api: mcp` one) whose calls may take `total`.
fn target_for(
    service: &str,
    urls: &BTreeMap<String, String>,
    scenario: &Scenario,
    baggage: &hyper::header::HeaderValue,
    total: Duration,
) -> Result<McpTarget> {
    let spec = &scenario.services[service];
    let headers = spec
        .headers
        .iter()
        .cloned()
        .chain([(BAGGAGE.clone(), baggage.clone())])
        .collect();
    let transport = super::super::target::mcp_transport(spec, &urls[service], headers)?;
    let timeouts = Timeouts {
        total,
        ..scenario.timeouts
    };
    Ok(McpTarget::new(transport, timeouts, MAX_JSON_BYTES, false))
}

/// One target per step that calls an `api: mcp` service, by step name: tool steps
/// with their `timeout`, `mcp` steps with theirs (else the run's).
pub(super) fn targets(
    plan: &FlowPlan,
    urls: &BTreeMap<String, String>,
    scenario: &Scenario,
    baggage: &hyper::header::HeaderValue,
) -> Result<BTreeMap<String, McpTarget>> {
    let mut targets = BTreeMap::new();
    for step in &plan.steps {
        let is_mcp = plan.services[&step.service].api == ApiKind::Mcp;
        let total = match &step.kind {
            StepKind::Tool(ToolPlan { timeout, .. }) if is_mcp => *timeout,
            StepKind::Mcp(McpStepPlan { timeout, .. }) => {
                timeout.unwrap_or(scenario.timeouts.total)
            }
            _ => continue,
        };
        let target = target_for(&step.service, urls, scenario, baggage, total)?;
        targets.insert(step.name.clone(), target);
    }
    Ok(targets)
}

/// Offers each `tools: { from }` chat step the tools its service lists now, as the
/// model's functions; a service that cannot list them stops the run before it starts.
pub(super) async fn offer_listed_tools(
    runtime: &mut FlowRuntime,
    scenario: &Scenario,
) -> Result<()> {
    let plan = runtime.plan.clone();
    for step in &plan.steps {
        let StepKind::Chat(ChatPlan {
            tools_from: Some(service),
            ..
        }) = &step.kind
        else {
            continue;
        };
        let total = scenario.timeouts.total;
        let target = target_for(service, &runtime.urls, scenario, &runtime.baggage, total)?;
        let tools = mcp::list_tools(runtime.client(service), &target)
            .await
            .map_err(|e| {
                anyhow::anyhow!(
                    "step `{}`: listing service `{service}`'s tools: {e}",
                    step.name
                )
            })?;
        if tools.is_empty() {
            anyhow::bail!("step `{}`: service `{service}` lists no tools", step.name);
        }
        let functions: Vec<Value> = tools.iter().map(function_of).collect();
        let chat = runtime
            .chats
            .get_mut(&step.name)
            .expect("every chat step has a target");
        chat.extra_body
            .insert("tools".into(), Value::from(functions));
    }
    Ok(())
}

/// An MCP tool as the chat API's function.
fn function_of(tool: &Value) -> Value {
    json!({"type": "function", "function": {
        "name": tool["name"],
        "description": tool.get("description").cloned().unwrap_or_else(|| json!("")),
        "parameters": tool.get("inputSchema").cloned().unwrap_or_else(|| json!({"type": "object", "properties": {}})),
    }})
}

/// The text an agent hands back to its model for a result: its text blocks, else its
/// structured content, else the whole result.
fn text_of(result: &Value) -> String {
    let texts: Vec<&str> = result["content"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|block| block.get("text").and_then(Value::as_str))
        .collect();
    if !texts.is_empty() {
        return texts.join("\n");
    }
    match result.get("structuredContent") {
        Some(structured) => structured.to_string(),
        None => result.to_string(),
    }
}

/// One tool call of the model's as `tools/call` on the step's MCP service: the text
/// that goes back to the model (an error's text when the call failed).
pub(super) async fn call_tool(
    session: &mut Session<'_>,
    slot: &mut Slot,
    step: &Step,
    tool: &str,
    arguments: Value,
) -> String {
    let Value::Object(args) = arguments else {
        let message = format!("the model's arguments for `{tool}` are not a JSON object");
        slot.record.fail(
            Outcome::Error,
            FailStage::Decode,
            "invalid_arguments",
            &message,
        );
        return format!("error: {message}");
    };
    let call = McpCall::Tool {
        name: tool.to_owned(),
        args,
    };
    let result = send(session, slot, step, &call).await;
    let Some(result) = result else {
        let e = slot.record.error.clone();
        return e.map_or("error".to_owned(), |e| {
            format!("error: {}: {}", e.kind, e.message)
        });
    };
    checked_text(session, step, slot, &result).await
}

/// A result's text (see [`text_of`]), the step's assertion checked on it.
async fn checked_text(
    session: &Session<'_>,
    step: &Step,
    slot: &mut Slot,
    result: &Value,
) -> String {
    let text = text_of(result);
    let output = Output {
        text: &text,
        json: Some(result),
        ..Output::default()
    };
    session.check(step, &mut slot.record, &output).await;
    text
}

/// `call` on the step's target, unless the drain runs out first.
async fn send(
    session: &Session<'_>,
    slot: &mut Slot,
    step: &Step,
    call: &McpCall,
) -> Option<Value> {
    let runtime = session.runtime;
    let request = mcp::call(
        runtime.client(&step.service),
        &runtime.mcp[&step.name],
        call,
        false,
        &slot.traceparent,
        session.shared.clock,
        &mut slot.record,
    );
    Session::guarded(&session.shared.abort, request)
        .await
        .unwrap_or_else(|| Session::cancelled(&mut slot.record))
}

/// An `mcp` step: its call, rendered over the session; captures `.text` and `.json`.
pub(super) async fn mcp_step(session: &mut Session<'_>, step: &Step, plan: &McpStepPlan) -> Went {
    let Some(mut slot) = session.begin(step, None) else {
        return Went::Refused;
    };
    let call = match render(session, step, &plan.op) {
        Ok(call) => call,
        Err(e) => return session.unsendable(slot, "template", e),
    };
    if let Some(mark) = &mut slot.record.step {
        mark.tool = match &call {
            McpCall::Tool { name, .. } => Some(name.clone()),
            _ => None,
        };
    }
    if let Some(result) = send(session, &mut slot, step, &call).await {
        let text = checked_text(session, step, &mut slot, &result).await;
        session.set_step(&step.name, json!({"text": text, "json": result}));
    }
    let ok = slot.record.outcome == Outcome::Ok;
    session.finish(slot);
    session.went(ok)
}

/// The step's call, its templates rendered against the session's context.
fn render(session: &Session<'_>, step: &Step, op: &McpStepOp) -> Result<McpCall, String> {
    let plan = &session.runtime.plan;
    let args = |args: &McpArgs| -> Result<serde_json::Map<String, Value>, String> {
        let mut value = args.value.clone();
        for pointer in &args.templated {
            let text = plan.render(&format!("{}.args{pointer}", step.name), &session.context)?;
            if let Some(leaf) = leaf_mut(&mut value, pointer) {
                *leaf = Value::String(text);
            }
        }
        Ok(value)
    };
    Ok(match op {
        McpStepOp::Tool { name, args: a } => McpCall::Tool {
            name: name.clone(),
            args: args(a)?,
        },
        McpStepOp::Read => McpCall::Read {
            uri: plan.render(&format!("{}.read", step.name), &session.context)?,
        },
        McpStepOp::Prompt { name, args: a } => McpCall::Prompt {
            name: name.clone(),
            args: args(a)?,
        },
        McpStepOp::List(list) => McpCall::List(*list),
        McpStepOp::Ping => McpCall::Ping,
    })
}
