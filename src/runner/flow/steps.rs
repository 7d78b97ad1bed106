//! What each kind of step does: embed, search, chat (and its follow-up turns), tool
//! calls, HTTP; each records its requests and says whether the session goes on.

use super::*;

pub(super) async fn embed(session: &mut Session<'_>, step: &Step) -> Went {
    let Some(mut slot) = session.begin(step, None) else {
        return Went::Refused;
    };
    let input = match session
        .runtime
        .plan
        .render(&format!("{}.input", step.name), &session.context)
    {
        Ok(text) => text,
        Err(e) => return session.unsendable(slot, "template", e),
    };
    let model = session
        .runtime
        .models
        .get(&step.service)
        .cloned()
        .unwrap_or_default();
    let body = json!({"model": model, "input": input})
        .to_string()
        .into_bytes();
    let timeout = session.runtime.timeouts.total;
    let answer = session
        .json_call(
            &mut slot,
            Call::post(&step.service, "/v1/embeddings", body, timeout),
        )
        .await;
    if let Some(answer) = answer {
        match embedding_of(&answer.json, 0) {
            Some(vector) => {
                let output = Output {
                    text: &input,
                    numbers: &vector,
                    items: Some(vector.len()),
                    ..Output::default()
                };
                session.check(step, &mut slot.record, &output).await;
                session.set_step(
                    &step.name,
                    json!({"dimensions": vector.len(), "input": input}),
                );
                session.vectors.insert(step.name.clone(), vector);
            }
            None => slot.record.fail(
                Outcome::Error,
                FailStage::Decode,
                "invalid_embedding",
                "the answer has no data[0].embedding list of numbers",
            ),
        }
    }
    let ok = slot.record.outcome == Outcome::Ok;
    session.finish(slot);
    session.went(ok)
}

pub(super) async fn search(session: &mut Session<'_>, step: &Step, plan: &SearchPlan) -> Went {
    let SearchPlan {
        embedding,
        top_k,
        truth,
        ..
    } = plan;
    let Some(mut slot) = session.begin(step, None) else {
        return Went::Refused;
    };
    let vector = session.vectors.get(embedding).cloned().unwrap_or_default();
    let runtime = session.runtime;
    let timeout = runtime.timeouts.total;
    let collection = &runtime.plan.services[&step.service].collection;
    let hits: Option<Vec<Hit>> = match runtime.tables.get(&step.service) {
        None if runtime.grpc.contains_key(&step.service) => {
            let request = qdrant_grpc_request(collection, &vector, *top_k);
            let call = grpc_client::unary::<_, qdrant::PointsResponse>(
                runtime.client(&step.service),
                &runtime.grpc[&step.service],
                qdrant::SEARCH,
                &request,
                &slot.traceparent,
                session.shared.clock,
                &mut slot.record,
            );
            Session::guarded(&session.shared.abort, call)
                .await
                .unwrap_or_else(|| Session::cancelled(&mut slot.record))
                .map(|answer| qdrant_grpc_hits(&answer))
        }
        Some(table) => {
            let search = table.search(
                &vector,
                *top_k,
                timeout,
                session.shared.clock,
                &mut slot.record,
            );
            Session::guarded(&session.shared.abort, search)
                .await
                .unwrap_or_else(|| Session::cancelled(&mut slot.record))
        }
        None => {
            let path = format!("/collections/{collection}/points/search");
            let body = qdrant_body(&vector, *top_k).to_string().into_bytes();
            let answer = session
                .json_call(&mut slot, Call::post(&step.service, &path, body, timeout))
                .await;
            answer.and_then(|a| match qdrant_hits(&a.json) {
                Ok(hits) => Some(hits),
                Err(e) => {
                    slot.record
                        .fail(Outcome::Error, FailStage::Decode, "invalid_result", e);
                    None
                }
            })
        }
    };
    if let Some(hits) = hits {
        let ids: Vec<String> = hits.iter().map(|h| h.id.clone()).collect();
        if let Some(mark) = &mut slot.record.step {
            mark.results = Some(hits.len() as u32);
            mark.recall = truth
                .as_ref()
                .and_then(|t| t.recall(&session.prompt, &ids, *top_k as usize));
        }
        let text: String = hits
            .iter()
            .map(|h| h.text.as_str())
            .collect::<Vec<_>>()
            .join("\n");
        let passages = serde_json::to_value(&hits).unwrap_or_default();
        let output = Output {
            text: &text,
            items: Some(hits.len()),
            json: Some(&passages),
            ..Output::default()
        };
        session.check(step, &mut slot.record, &output).await;
        session.set_step(&step.name, json!({"passages": passages, "ids": ids}));
        session.context["passages"] = passages;
    }
    let ok = slot.record.outcome == Outcome::Ok;
    session.finish(slot);
    session.went(ok)
}

/// A chat step's first call (`follow_up: None`), or a follow-up turn with the
/// conversation so far.
pub(super) async fn chat(
    session: &mut Session<'_>,
    step: &Step,
    plan: &ChatPlan,
    follow_up: Option<Vec<Value>>,
) -> Went {
    let ChatPlan {
        max_tokens,
        has_system,
        ..
    } = plan;
    let Some(mut slot) = session.begin(step, None) else {
        return Went::Refused;
    };
    let plan = &session.runtime.plan;
    let messages = match follow_up {
        Some(messages) => messages,
        None => {
            let mut messages = Vec::new();
            if *has_system {
                match plan.render(&format!("{}.system", step.name), &session.context) {
                    Ok(text) => messages.push(json!({"role": "system", "content": text})),
                    Err(e) => return session.unsendable(slot, "template", e),
                }
            }
            match plan.render(&format!("{}.user", step.name), &session.context) {
                Ok(text) => messages.push(json!({"role": "user", "content": text})),
                Err(e) => return session.unsendable(slot, "template", e),
            }
            messages
        }
    };
    let target = &session.runtime.chats[&step.name];
    let input_tokens = messages
        .iter()
        .filter_map(|m| m["content"].as_str())
        .map(|t| target.counting.tokenizer.count(t) as u32)
        .sum();
    let payload = Payload {
        prompt: PromptBody::Messages(messages.clone()),
        max_tokens: *max_tokens,
        input_tokens,
        traceparent: Some(slot.traceparent.clone()),
        prefix: None,
        previous_response_id: None,
        grade: None,
        fields: None,
    };
    let call = openai::call(
        session.runtime.client(&step.service),
        target,
        &payload,
        session.shared.clock,
        &mut slot.record,
    );
    let answer = Session::guarded(&session.shared.abort, call)
        .await
        .unwrap_or_else(|| Session::cancelled(&mut slot.record));
    if let Some(answer) = answer {
        let arguments: Vec<&str> = answer
            .tool_calls
            .iter()
            .map(|c| c.arguments.as_str())
            .collect();
        let finish_reason = slot.record.finish_reason.clone();
        let output = Output {
            text: &answer.text,
            tool_arguments: arguments,
            finish_reason: finish_reason.as_deref(),
            ..Output::default()
        };
        session.check(step, &mut slot.record, &output).await;
        let calls: Vec<Value> = answer
            .tool_calls
            .iter()
            .map(|c| json!({"name": c.name, "arguments": c.arguments}))
            .collect();
        session.set_step(
            &step.name,
            json!({"text": answer.text, "tool_calls": calls, "finish_reason": finish_reason}),
        );
        session
            .conversations
            .insert(step.name.clone(), (messages, answer));
    }
    let ok = slot.record.outcome == Outcome::Ok;
    session.finish(slot);
    session.went(ok)
}

/// Runs the chat step's tool calls, sends the results back for a follow-up turn, and
/// repeats while the model calls tools, up to `max_iterations` rounds.
pub(super) async fn tool(session: &mut Session<'_>, step: &Step, plan: &ToolPlan) -> Went {
    let ToolPlan {
        chat: chat_name,
        timeout,
        paths,
        max_iterations,
    } = plan;
    let flow = session.runtime.plan.clone();
    let (chat_step, chat_plan) = flow
        .steps
        .iter()
        .find_map(|s| match &s.kind {
            StepKind::Chat(chat) if &s.name == chat_name => Some((s, chat)),
            _ => None,
        })
        .expect("validated: the chat step exists");
    for _ in 0..*max_iterations {
        let Some((mut messages, answer)) = session.conversations.get(chat_name).cloned() else {
            return Went::On;
        };
        if answer.tool_calls.is_empty() {
            return Went::On;
        }
        let calls: Vec<Value> = answer
            .tool_calls
            .iter()
            .map(|c| json!({"id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.arguments}}))
            .collect();
        messages.push(json!({"role": "assistant", "content": answer.text, "tool_calls": calls}));
        for call in &answer.tool_calls {
            let arguments: Result<Value, _> = serde_json::from_str(&call.arguments);
            let hash = tool_call_hash(
                &call.name,
                arguments
                    .as_ref()
                    .unwrap_or(&Value::String(call.arguments.clone())),
            );
            let Some(mut slot) = session.begin(step, Some((call.name.clone(), hash))) else {
                return Went::Refused;
            };
            let content = match arguments {
                Err(e) => {
                    slot.record.fail(
                        Outcome::Error,
                        FailStage::Decode,
                        "invalid_arguments",
                        format!(
                            "the model's arguments for `{}` are not JSON: {e}",
                            call.name
                        ),
                    );
                    format!("error: arguments are not JSON: {e}")
                }
                Ok(arguments) if session.runtime.mcp.contains_key(&step.name) => {
                    super::mcp::call_tool(session, &mut slot, step, &call.name, arguments).await
                }
                Ok(arguments) => {
                    let path = paths
                        .get(&call.name)
                        .cloned()
                        .unwrap_or_else(|| format!("/tools/{}", call.name));
                    call_tool(session, &mut slot, step, &path, arguments, *timeout).await
                }
            };
            let outcome = slot.record.outcome;
            session.finish(slot);
            match session.breaker.heed(outcome, &call.name) {
                Heed::On => {}
                Heed::Failed => session.failed = true,
                Heed::Open(reason) => {
                    session.fallback = Some(reason);
                    return Went::Stopped;
                }
                Heed::Refused => return Went::Refused,
            }
            messages.push(json!({"role": "tool", "tool_call_id": call.id, "content": content}));
        }
        match chat(session, chat_step, chat_plan, Some(messages)).await {
            Went::On => {}
            other => return other,
        }
    }
    Went::On
}

/// One tool call of the model's, posted to the tool's path; the answer's text goes
/// back to the model (an error's text when the call failed).
async fn call_tool(
    session: &mut Session<'_>,
    slot: &mut Slot,
    step: &Step,
    path: &str,
    arguments: Value,
    timeout: Duration,
) -> String {
    let body = arguments.to_string().into_bytes();
    let answer = session
        .json_call(slot, Call::post(&step.service, path, body, timeout))
        .await;
    let Some(answer) = answer else {
        let e = slot.record.error.clone();
        return e.map_or("error".to_owned(), |e| {
            format!("error: {}: {}", e.kind, e.message)
        });
    };
    check_json(session, step, slot, &answer.json).await
}

/// A JSON answer checked against the step's assertions; returns its text.
async fn check_json(
    session: &mut Session<'_>,
    step: &Step,
    slot: &mut Slot,
    json: &Value,
) -> String {
    let text = json.to_string();
    let output = Output {
        text: &text,
        json: Some(json),
        ..Output::default()
    };
    session.check(step, &mut slot.record, &output).await;
    text
}

pub(super) async fn http_step(session: &mut Session<'_>, step: &Step, plan: &HttpPlan) -> Went {
    let HttpPlan {
        method,
        path,
        has_body,
        expect_status,
        timeout,
    } = plan;
    let Some(mut slot) = session.begin(step, None) else {
        return Went::Refused;
    };
    let body = if *has_body {
        match session
            .runtime
            .plan
            .render(&format!("{}.body", step.name), &session.context)
        {
            Ok(text) => text.into_bytes(),
            Err(e) => return session.unsendable(slot, "template", e),
        }
    } else {
        Vec::new()
    };
    let timeout = timeout.unwrap_or(session.runtime.timeouts.total);
    let answer = session
        .json_call(
            &mut slot,
            Call {
                service: &step.service,
                method: method.clone(),
                path,
                body,
                timeout,
                expect_status: *expect_status,
            },
        )
        .await;
    if let Some(answer) = answer {
        check_json(session, step, &mut slot, &answer.json).await;
        session.set_step(
            &step.name,
            json!({"json": answer.json, "status": answer.status}),
        );
    }
    let ok = slot.record.outcome == Outcome::Ok;
    session.finish(slot);
    session.went(ok)
}
