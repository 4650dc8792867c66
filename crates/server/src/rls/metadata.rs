//! The RLS response's `dynamic_metadata`, as envoyproxy/ratelimit's `RESPONSE_DYNAMIC_METADATA`
//! writes it (its `ratelimitToMetadata`): Envoy stores it under the filter's name, so routes,
//! access logs and later filters can read what was decided and the `metadata` of the limits the
//! request passed.
//!
//! Shape: `{domain, descriptors: [{entries: ["k=v", …], limit?, hitsAddend?}], hitsAddend?,
//! metadata?}`, where `metadata` merges the `metadata` of every rule whose descriptor passed, the
//! first writer winning except where both values are mappings (merged recursively).

use sluice_engine::{Code, Decision};
use sluice_proto::envoy::protobuf::value::Kind;
use sluice_proto::envoy::protobuf::{ListValue, Struct, Value};
use sluice_proto::envoy::ratelimit as rl;

/// The dynamic metadata of `decision` on `req`.
pub fn dynamic_metadata(req: &rl::RateLimitRequest, decision: &Decision) -> Struct {
    let mut fields = std::collections::HashMap::new();
    fields.insert("domain".to_string(), string(&req.domain));
    let descriptors = req.descriptors.iter().map(descriptor).collect();
    fields.insert(
        "descriptors".to_string(),
        kind(Kind::ListValue(ListValue {
            values: descriptors,
        })),
    );
    if req.hits_addend != 0 {
        fields.insert(
            "hitsAddend".to_string(),
            kind(Kind::NumberValue(f64::from(req.hits_addend))),
        );
    }
    let mut passed = Struct::default();
    for outcome in decision.outcomes.iter().filter(|o| o.code == Code::Ok) {
        let rule = outcome
            .limit
            .and_then(|l| l.rule)
            .and_then(|id| decision.rules.rule(id));
        if let Some(metadata) = rule.and_then(|r| r.metadata.as_deref()) {
            merge(&mut passed, metadata);
        }
    }
    if !passed.fields.is_empty() {
        fields.insert("metadata".to_string(), kind(Kind::StructValue(passed)));
    }
    Struct { fields }
}

/// One request descriptor: its entries as `key=value`, its override and its own hits.
fn descriptor(d: &sluice_proto::envoy::common_ratelimit::RateLimitDescriptor) -> Value {
    let mut fields = std::collections::HashMap::new();
    let entries = d
        .entries
        .iter()
        .map(|e| string(&format!("{}={}", e.key, e.value)))
        .collect();
    fields.insert(
        "entries".to_string(),
        kind(Kind::ListValue(ListValue { values: entries })),
    );
    if let Some(limit) = &d.limit {
        let unit = sluice_proto::envoy::types::RateLimitUnit::try_from(limit.unit)
            .map_or("UNKNOWN", |u| u.as_str_name());
        fields.insert(
            "limit".to_string(),
            string(&format!(
                "requests_per_unit:{} unit:{unit}",
                limit.requests_per_unit
            )),
        );
    }
    if let Some(hits) = &d.hits_addend {
        fields.insert(
            "hitsAddend".to_string(),
            kind(Kind::NumberValue(hits.value as f64)),
        );
    }
    kind(Kind::StructValue(Struct { fields }))
}

/// Adds `src` to `dest`: keys `dest` lacks are added; where both hold mappings they are merged.
fn merge(dest: &mut Struct, src: &serde_json::Map<String, serde_json::Value>) {
    for (key, value) in src {
        match dest.fields.get_mut(key) {
            None => {
                dest.fields.insert(key.clone(), json(value));
            }
            Some(Value {
                kind: Some(Kind::StructValue(inner)),
            }) => {
                if let serde_json::Value::Object(more) = value {
                    merge(inner, more);
                }
            }
            Some(_) => {}
        }
    }
}

/// A JSON value as a protobuf `Value` (numbers as doubles, as `Struct` holds them).
fn json(value: &serde_json::Value) -> Value {
    kind(match value {
        serde_json::Value::Null => Kind::NullValue(0),
        serde_json::Value::Bool(b) => Kind::BoolValue(*b),
        serde_json::Value::Number(n) => Kind::NumberValue(n.as_f64().unwrap_or(f64::NAN)),
        serde_json::Value::String(s) => Kind::StringValue(s.clone()),
        serde_json::Value::Array(items) => Kind::ListValue(ListValue {
            values: items.iter().map(json).collect(),
        }),
        serde_json::Value::Object(map) => {
            let mut s = Struct::default();
            merge(&mut s, map);
            Kind::StructValue(s)
        }
    })
}

fn string(s: &str) -> Value {
    kind(Kind::StringValue(s.to_string()))
}

fn kind(kind: Kind) -> Value {
    Value { kind: Some(kind) }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn text(v: &Value) -> Option<&str> {
        match &v.kind {
            Some(Kind::StringValue(s)) => Some(s),
            _ => None,
        }
    }

    #[test]
    fn merging_keeps_the_first_value_and_merges_mappings() {
        let mut dest = Struct::default();
        let a = json!({"name": "first", "quota": {"a": 1}});
        let b = json!({"name": "second", "quota": {"b": 2}, "extra": true});
        merge(&mut dest, a.as_object().expect("object"));
        merge(&mut dest, b.as_object().expect("object"));
        assert_eq!(text(&dest.fields["name"]), Some("first"));
        let Some(Kind::StructValue(quota)) = &dest.fields["quota"].kind else {
            panic!("quota is a struct");
        };
        assert_eq!(quota.fields.len(), 2, "both mappings' keys");
        assert!(dest.fields.contains_key("extra"));
    }
}
