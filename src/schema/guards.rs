//! The schema's shape, checked before it compiles: no `$ref` chain or nesting deeper than the
//! validator's recursion can take, and no loop of subschemas on the same instance.
//!
//! Both follow `$ref` as the validator does: jsonschema resolves references with the
//! `referencing` crate, against the base URI that the schema's `$id`s set, percent-decoded,
//! absolute (`https://…/recipe.schema.json#/definitions/a`), relative (`other.json#…`,
//! `#/definitions/%61`) or through an anchor (`#name`). So do these checks, with the same
//! crate over the same document: a loop or a chain written in any of those forms is the same
//! loop or chain. A reference that does not resolve is not followed here; the compiler refuses
//! it.

use std::collections::{HashMap, HashSet};

use referencing::{Draft, Registry, Resolver};
use serde_json::Value;

use super::{subschemas, SchemaError};
use crate::recipe::child;

/// How deep validation may recurse: nesting plus `$ref` hops. jsonschema compiles and
/// validates recursively, so a long `$ref` chain (20 000 links fit in 1 MiB) would overflow
/// the stack; real schemas stay within a few dozen levels.
pub const MAX_SCHEMA_DEPTH: usize = 256;

/// The base URI of a schema without `$id`, as jsonschema has it.
const DEFAULT_BASE: &str = "json-schema:///";

/// Refuses a schema deeper than [`MAX_SCHEMA_DEPTH`] or with a loop on the same instance.
pub(super) fn check(document: &Value, id: Option<&str>) -> Result<(), SchemaError> {
    let base = id.map_or(DEFAULT_BASE, |id| id.trim_end_matches('#'));
    let registry = referencing::uri::from_str(base)
        .map_err(|e| e.to_string())
        .and_then(|base| {
            let registry = Registry::new().draft(Draft::Draft7).add(base.as_str(), document);
            Ok((registry.and_then(|r| r.prepare()).map_err(|e| e.to_string())?, base))
        })
        .map_err(|e| SchemaError::Invalid {
            pointer: "/$id".into(),
            reason: super::clip(&format!("its references cannot be resolved: {e}"), 300),
        })?;
    let (registry, base) = registry;
    let mut references = References::new(registry.resolver(base), document);
    check_depth(document, &mut references)?;
    check_ref_cycles(document, &mut references)
}

/// Where each subschema stands (its pointer) and what its `$ref`s resolve against.
struct References<'r> {
    scopes: HashMap<*const Value, Scope<'r>>,
}

struct Scope<'r> {
    /// Its base URI, from the `$id`s around it (and its own).
    resolver: Resolver<'r>,
    /// Its JSON pointer in the document; for a target outside every schema position, the
    /// reference that reached it.
    pointer: String,
}

impl<'r> References<'r> {
    fn new(root: Resolver<'r>, document: &'r Value) -> References<'r> {
        let mut references = References { scopes: HashMap::new() };
        references.enter(document, root, String::new());
        references
    }

    /// Records `node` and every subschema below it, each with its scope.
    fn enter(&mut self, node: &'r Value, resolver: Resolver<'r>, pointer: String) {
        let mut pending = vec![(node, resolver, pointer)];
        while let Some((node, resolver, pointer)) = pending.pop() {
            if self.scopes.contains_key(&(node as *const Value)) {
                continue;
            }
            if let Some(map) = node.as_object() {
                for (tokens, sub) in subschemas(map) {
                    let inner = resolver.in_subresource(Draft::Draft7.create_resource_ref(sub));
                    let at = tokens.iter().fold(pointer.clone(), |at, token| child(&at, token));
                    pending.push((sub, inner.unwrap_or_else(|_| resolver.clone()), at));
                }
            }
            self.scopes.insert(node, Scope { resolver, pointer });
        }
    }

    /// Where `node`'s `$ref` leads, and that place's pointer.
    fn target(&mut self, node: &'r Value) -> Option<(&'r Value, String)> {
        let reference = node.get("$ref")?.as_str()?;
        let resolved = self.scopes.get(&(node as *const Value))?.resolver.lookup(reference).ok()?;
        let (target, resolver, _) = resolved.into_inner();
        if !self.scopes.contains_key(&(target as *const Value)) {
            self.enter(target, resolver, reference.to_owned());
        }
        Some((target, self.scopes[&(target as *const Value)].pointer.clone()))
    }
}

/// Refuses a loop of subschemas that apply to the same instance: `$ref`s, and `allOf`,
/// `anyOf`, `oneOf`, `not`, `if`, `then`, `else` and the schemas of `dependencies` (`a` →
/// `allOf/0` → `$ref` → `a`). Validating such a loop never moves into a part of the instance,
/// so it never ends: it constrains nothing, and the recipe under it would be accepted
/// whatever it holds. Recursion through `properties`, `items` and the other keywords that
/// apply to a member or an element descends the instance, which ends it: that is a tree.
fn check_ref_cycles<'r>(document: &'r Value, references: &mut References<'r>) -> Result<(), SchemaError> {
    // Absent: not seen; false: on the path being followed; true: leads to no loop.
    let mut state: HashMap<*const Value, bool> = HashMap::new();
    let mut starts: Vec<(String, &Value)> = vec![(String::new(), document)];
    while let Some((pointer, node)) = starts.pop() {
        if let Some(map) = node.as_object() {
            for (tokens, sub) in subschemas(map) {
                starts.push((below(&pointer, &tokens), sub));
            }
        }
        if state.contains_key(&(node as *const Value)) {
            continue;
        }
        state.insert(node, false);
        let mut path = vec![(node, same_instance(references, node, &pointer))];
        while let Some((at, next)) = path.last_mut() {
            let Some((edge, target_pointer, target)) = next.pop() else {
                state.insert(*at, true);
                path.pop();
                continue;
            };
            match state.get(&(target as *const Value)) {
                Some(false) => {
                    return Err(SchemaError::Invalid {
                        pointer: edge,
                        reason: "the schema leads back to itself through $ref, allOf, anyOf, oneOf, not, if, then or else without descending into the instance, so it would accept anything".into(),
                    })
                }
                Some(true) => {}
                None => {
                    state.insert(target, false);
                    path.push((target, same_instance(references, target, &target_pointer)));
                }
            }
        }
    }
    Ok(())
}

/// The subschemas that apply to the same instance as `node` (at `pointer`):
/// `(the pointer of the keyword, the subschema's pointer, the subschema)`. A schema with a
/// `$ref` is nothing but that reference in draft-07.
fn same_instance<'r>(
    references: &mut References<'r>,
    node: &'r Value,
    pointer: &str,
) -> Vec<(String, String, &'r Value)> {
    let Some(map) = node.as_object() else { return Vec::new() };
    if map.contains_key("$ref") {
        let edge = child(pointer, "$ref");
        return references.target(node).map(|(target, at)| (edge, at, target)).into_iter().collect();
    }
    let mut out = Vec::new();
    for (key, value) in map {
        let in_place =
            matches!(key.as_str(), "allOf" | "anyOf" | "oneOf" | "not" | "if" | "then" | "else" | "dependencies");
        if !in_place {
            continue;
        }
        let subs: Vec<(String, &Value)> = match value {
            Value::Array(list) => list.iter().enumerate().map(|(i, v)| (i.to_string(), v)).collect(),
            // `dependencies`: a schema per property (a list of names there holds no schema).
            Value::Object(named) if key == "dependencies" => named.iter().map(|(n, v)| (n.clone(), v)).collect(),
            one => vec![(String::new(), one)],
        };
        for (token, sub) in subs {
            let tokens: Vec<String> = if token.is_empty() { vec![key.clone()] } else { vec![key.clone(), token] };
            let at = below(pointer, &tokens);
            out.push((at.clone(), at, sub));
        }
    }
    out
}

/// `pointer` with `tokens` appended.
fn below(pointer: &str, tokens: &[String]) -> String {
    let mut out = pointer.to_owned();
    for token in tokens {
        crate::recipe::push_token(&mut out, token);
    }
    out
}

/// Refuses schemas deeper than [`MAX_SCHEMA_DEPTH`]. Recursion through a `$ref` cycle is not
/// depth (validation of it is bounded by the instance's own depth, at most 128).
fn check_depth<'r>(document: &'r Value, references: &mut References<'r>) -> Result<(), SchemaError> {
    let mut walk = DepthWalk { references, memo: HashMap::new(), visiting: HashSet::new() };
    walk.below(document, "", 0).map(drop)
}

struct DepthWalk<'w, 'r> {
    references: &'w mut References<'r>,
    memo: HashMap<*const Value, usize>,
    visiting: HashSet<*const Value>,
}

impl<'r> DepthWalk<'_, 'r> {
    fn below(&mut self, node: &'r Value, pointer: &str, level: usize) -> Result<usize, SchemaError> {
        if level > MAX_SCHEMA_DEPTH {
            return Err(SchemaError::Invalid {
                pointer: pointer.to_owned(),
                reason: format!("subschemas and $ref chains nest deeper than {MAX_SCHEMA_DEPTH} levels"),
            });
        }
        let key = node as *const Value;
        if let Some(&depth) = self.memo.get(&key) {
            return Ok(depth);
        }
        if !self.visiting.insert(key) {
            return Ok(0);
        }
        let mut deepest = 0;
        if let Some(map) = node.as_object() {
            if let Some((target, at)) = self.references.target(node) {
                deepest = deepest.max(1 + self.below(target, &at, level + 1)?);
            }
            for (tokens, sub) in subschemas(map) {
                deepest = deepest.max(1 + self.below(sub, &below(pointer, &tokens), level + 1)?);
            }
        }
        self.visiting.remove(&key);
        self.memo.insert(key, deepest);
        Ok(deepest)
    }
}
