//! The class tree that HTB and HFSC share: class names, parents, which classes are leaves,
//! the classifier classes each leaf takes, the default leaf, and the leaves' disciplines.
//!
//! Each scheduler describes its classes as [`ClassSpec`]s and gets back a validated
//! [`Tree`] whose indices are the positions in the configuration; the scheduling state
//! (tokens, service curves) stays with the scheduler.

use super::{BuildCtx, ConfigError, QdiscConfig};
use crate::units::Rate;
use std::collections::HashMap;

/// What the tree needs to know of one configured class.
pub(crate) struct ClassSpec<'a> {
    pub name: &'a str,
    pub parent: Option<&'a str>,
    /// Classifier classes the leaf takes (default: its own name, if the classifier has it).
    pub classes: Option<&'a [String]>,
    /// The leaf's discipline (default: a 1000-packet FIFO).
    pub queue: Option<&'a QdiscConfig>,
}

impl<'a> ClassSpec<'a> {
    /// A class from its configuration's fields.
    pub fn new(
        name: &'a str,
        parent: Option<&'a str>,
        classes: Option<&'a [String]>,
        queue: Option<&'a QdiscConfig>,
    ) -> Self {
        ClassSpec {
            name,
            parent,
            classes,
            queue,
        }
    }
}

/// A configured class of a tree (HTB's, HFSC's).
pub(crate) trait TreeClass {
    fn spec(&self) -> ClassSpec<'_>;
}

/// The specs of configured classes, in order.
pub(crate) fn specs<C: TreeClass>(classes: &[C]) -> Vec<ClassSpec<'_>> {
    classes.iter().map(TreeClass::spec).collect()
}

/// Limits a scheduler puts on its tree.
pub(crate) struct Limits {
    /// The scheduler's name in error keys (`htb`, `hfsc`).
    pub kind: &'static str,
    pub max_classes: usize,
    /// Deepest allowed level (a root is at depth 0), if any.
    pub max_depth: Option<usize>,
}

impl Limits {
    pub fn new(kind: &'static str, max_classes: usize, max_depth: Option<usize>) -> Limits {
        Limits {
            kind,
            max_classes,
            max_depth,
        }
    }
}

/// A validated tree over the configured classes.
pub(crate) struct Tree {
    kind: &'static str,
    index: HashMap<String, usize>,
    /// Parent of each class (`None`: a root).
    pub parent: Vec<Option<usize>>,
    pub children: Vec<Vec<usize>>,
    /// Depth of each class (a root: 0).
    pub depth: Vec<usize>,
}

impl Tree {
    /// Check names, parents, cycles, depth, and that only leaves hold a queue or take
    /// classes.
    pub fn new(specs: &[ClassSpec<'_>], limits: &Limits) -> Result<Tree, ConfigError> {
        let kind = limits.kind;
        let n = specs.len();
        if n == 0 || n > limits.max_classes {
            return Err(ConfigError::new(
                format!("{kind}.classes"),
                format!("needs between 1 and {} classes", limits.max_classes),
            ));
        }
        let key = |i: usize, f: &str| format!("{kind}.classes[{i}].{f}");
        let mut index = HashMap::new();
        for (i, c) in specs.iter().enumerate() {
            if c.name.is_empty() {
                return Err(ConfigError::new(key(i, "name"), "must not be empty"));
            }
            if index.insert(c.name.to_string(), i).is_some() {
                return Err(ConfigError::new(
                    key(i, "name"),
                    format!("duplicate class '{}'", c.name),
                ));
            }
        }
        let mut parent = vec![None; n];
        let mut children = vec![Vec::new(); n];
        for (i, c) in specs.iter().enumerate() {
            if let Some(p) = c.parent {
                let pi = *index.get(p).ok_or_else(|| {
                    ConfigError::new(
                        key(i, "parent"),
                        format!("unknown parent class '{p}' of '{}'", c.name),
                    )
                })?;
                parent[i] = Some(pi);
                children[pi].push(i);
            }
        }
        // Depths; a walk longer than the class count means a cycle.
        let mut depth = vec![0usize; n];
        for (i, depth_i) in depth.iter_mut().enumerate() {
            let mut d = 0;
            let mut c = i;
            while let Some(p) = parent[c] {
                d += 1;
                c = p;
                if d > n {
                    return Err(ConfigError::new(
                        key(i, "parent"),
                        format!("class '{}' is part of a parent cycle", specs[i].name),
                    ));
                }
            }
            if limits.max_depth.is_some_and(|m| d >= m) {
                return Err(ConfigError::new(
                    key(i, "parent"),
                    format!(
                        "the tree is deeper than {} levels",
                        limits.max_depth.unwrap_or_default()
                    ),
                ));
            }
            *depth_i = d;
        }
        for (i, c) in specs.iter().enumerate() {
            if children[i].is_empty() {
                continue;
            }
            if c.queue.is_some() {
                return Err(ConfigError::new(
                    key(i, "queue"),
                    format!("'{}' has children; only leaves hold a queue", c.name),
                ));
            }
            if c.classes.is_some() {
                return Err(ConfigError::new(
                    key(i, "classes"),
                    format!("'{}' has children; only leaves take classes", c.name),
                ));
            }
        }
        Ok(Tree {
            kind,
            index,
            parent,
            children,
            depth,
        })
    }

    fn key(&self, i: usize, f: &str) -> String {
        format!("{}.classes[{i}].{f}", self.kind)
    }

    /// Whether class `i` has no children.
    pub fn is_leaf(&self, i: usize) -> bool {
        self.children[i].is_empty()
    }

    /// Build leaf `i`'s discipline with `build` (a [`QdiscConfig::build`] or another form of
    /// it); it sees `rate` as its link rate (CoDel's low-rate target). Errors are keyed
    /// below the class's `queue`.
    pub fn leaf_queue<Q>(
        &self,
        i: usize,
        spec: &ClassSpec<'_>,
        rate: Option<Rate>,
        ctx: &BuildCtx,
        build: impl FnOnce(&QdiscConfig, &BuildCtx) -> Result<Q, ConfigError>,
    ) -> Result<Q, ConfigError> {
        let ctx = &BuildCtx {
            link_rate: rate,
            ..ctx.clone()
        };
        match spec.queue {
            Some(q) => build(q, ctx),
            None => build(&QdiscConfig::default(), ctx),
        }
        .map_err(|e| e.within(self.key(i, "queue")))
    }

    /// The leaf each classifier class goes to (`None`: no leaf takes it). A leaf without
    /// `classes` takes the classifier class of its own name, if there is one.
    pub fn leaf_of_class(
        &self,
        specs: &[ClassSpec<'_>],
        ctx: &BuildCtx,
    ) -> Result<Vec<Option<usize>>, ConfigError> {
        let mut leaf_of_class: Vec<Option<usize>> = vec![None; ctx.classes.len()];
        for (i, c) in specs.iter().enumerate() {
            if !self.is_leaf(i) {
                continue;
            }
            let names: Vec<&str> = match c.classes {
                Some(v) => v.iter().map(String::as_str).collect(),
                None if ctx.classes.iter().any(|n| n == c.name) => vec![c.name],
                None => vec![],
            };
            for name in names {
                let id = ctx.class_id(name, &self.key(i, "classes"))?;
                let slot = &mut leaf_of_class[id.0 as usize];
                if let Some(other) = *slot {
                    return Err(ConfigError::new(
                        self.key(i, "classes"),
                        format!(
                            "class '{name}' is taken by both '{}' and '{}'",
                            specs[other].name, c.name
                        ),
                    ));
                }
                *slot = Some(i);
            }
        }
        Ok(leaf_of_class)
    }

    /// Resolve the default leaf's name.
    pub fn default_leaf(&self, name: Option<&str>) -> Result<Option<usize>, ConfigError> {
        let Some(d) = name else { return Ok(None) };
        let key = format!("{}.default", self.kind);
        let i = *self
            .index
            .get(d)
            .ok_or_else(|| ConfigError::new(&key, format!("unknown class '{d}'")))?;
        if !self.is_leaf(i) {
            return Err(ConfigError::new(
                key,
                format!("'{d}' has children; the default must be a leaf"),
            ));
        }
        Ok(Some(i))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec<'a>(name: &'a str, parent: Option<&'a str>) -> ClassSpec<'a> {
        ClassSpec {
            name,
            parent,
            classes: None,
            queue: None,
        }
    }

    const LIMITS: Limits = Limits {
        kind: "t",
        max_classes: 4,
        max_depth: Some(2),
    };

    #[test]
    fn builds_parents_children_and_depths() {
        let specs = [spec("leaf", Some("root")), spec("root", None)];
        let t = Tree::new(&specs, &LIMITS).unwrap();
        assert_eq!(t.parent, vec![Some(1), None]);
        assert_eq!(t.children, vec![vec![], vec![0]]);
        assert_eq!(t.depth, vec![1, 0]);
        assert!(t.is_leaf(0) && !t.is_leaf(1));
        assert_eq!(t.default_leaf(Some("leaf")).unwrap(), Some(0));
        let e = t.default_leaf(Some("root")).unwrap_err();
        assert_eq!(e.path, "t.default");
    }

    #[test]
    fn errors_name_the_class() {
        let err = |specs: &[ClassSpec<'_>]| Tree::new(specs, &LIMITS).err().unwrap();
        let e = err(&[spec("a", Some("b")), spec("b", Some("a"))]);
        assert_eq!(e.path, "t.classes[0].parent");
        assert!(e.msg.contains("cycle"), "{e}");
        let e = err(&[spec("a", None), spec("b", Some("a")), spec("c", Some("b"))]);
        assert!(e.msg.contains("deeper than 2"), "{e}");
        let e = err(&[spec("a", None), spec("a", None)]);
        assert_eq!(e.path, "t.classes[1].name");
        let e = err(&[spec("a", Some("x"))]);
        assert!(e.msg.contains("unknown parent class 'x'"), "{e}");
        let q = QdiscConfig::default();
        let e = err(&[
            ClassSpec {
                queue: Some(&q),
                ..spec("a", None)
            },
            spec("b", Some("a")),
        ]);
        assert_eq!(e.path, "t.classes[0].queue");
        assert!(err(&[]).msg.contains("between 1 and 4"));
    }

    #[test]
    fn leaves_take_their_classes_once() {
        let ctx = BuildCtx::with_classes(&["x", "y", "z"]);
        let ys = ["y".to_string(), "z".to_string()];
        let specs = [
            spec("x", None),
            ClassSpec {
                classes: Some(&ys),
                ..spec("other", None)
            },
        ];
        let t = Tree::new(&specs, &LIMITS).unwrap();
        assert_eq!(
            t.leaf_of_class(&specs, &ctx).unwrap(),
            vec![Some(0), Some(1), Some(1)]
        );
        let xs = ["x".to_string()];
        let specs = [
            spec("x", None),
            ClassSpec {
                classes: Some(&xs),
                ..spec("other", None)
            },
        ];
        let t = Tree::new(&specs, &LIMITS).unwrap();
        let e = t.leaf_of_class(&specs, &ctx).unwrap_err();
        assert!(e.msg.contains("taken by both 'x' and 'other'"), "{e}");
    }
}
