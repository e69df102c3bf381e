//! Where a fleet bucket's Redis is, for `pacer hammer`, `pacer replay` and
//! `pacer watch --redis`: one server by its URL, or a Redis Cluster by its
//! seed nodes (`--cluster`: the URL a comma-separated list of nodes, any of
//! the cluster's). A cluster connection (redis-rs' `ClusterConnection`)
//! learns the slots from a seed, sends each command to the primary that
//! owns its key's slot (`PACER.* key`, `FCALL … 1 key`, `EVALSHA … 1 key`),
//! follows `MOVED` and `ASK`, retries `TRYAGAIN` and lost connections, and
//! sends `SCRIPT LOAD` to every primary.

use std::time::Duration;

use redis::ConnectionLike;

/// How long connecting may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// A connection to one server or to a cluster.
pub type Connection = Box<dyn ConnectionLike + Send>;

/// One Redis server, or a cluster's seed nodes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Target {
    /// One server's URL.
    Server(String),
    /// A cluster's seed nodes' URLs.
    Cluster(Vec<String>),
}

impl Target {
    /// `url` as given to `--redis`: one server, or with `cluster` a
    /// comma-separated list of seed nodes (at least one, none empty).
    pub fn parse(url: &str, cluster: bool) -> Result<Target, String> {
        if !cluster {
            return Ok(Target::Server(url.to_string()));
        }
        let nodes: Vec<String> = url.split(',').map(|node| node.trim().to_string()).collect();
        if nodes.iter().any(String::is_empty) {
            return Err(format!(
                "--cluster needs --redis as seed node URLs separated by commas, got '{url}'"
            ));
        }
        Ok(Target::Cluster(nodes))
    }

    /// Connects, with replies awaited at most `read_timeout`.
    pub fn connect(&self, read_timeout: Duration) -> Result<Connection, String> {
        match self {
            Target::Server(url) => {
                let client = redis::Client::open(url.as_str())
                    .map_err(|e| format!("cannot use {url}: {}", error_text(&e)))?;
                let con = client
                    .get_connection_with_timeout(CONNECT_TIMEOUT)
                    .map_err(|e| format!("cannot reach Redis at {url}: {}", error_text(&e)))?;
                con.set_read_timeout(Some(read_timeout))
                    .map_err(|e| format!("cannot reach Redis at {url}: {}", error_text(&e)))?;
                Ok(Box::new(con))
            }
            Target::Cluster(nodes) => {
                let client =
                    redis::cluster::ClusterClientBuilder::new(nodes.iter().map(String::as_str))
                        .connection_timeout(CONNECT_TIMEOUT)
                        .response_timeout(read_timeout)
                        .build()
                        .map_err(|e| format!("cannot use {self}: {}", error_text(&e)))?;
                let con = client.get_connection().map_err(|e| {
                    format!(
                        "cannot reach the Redis Cluster at {self}: {}",
                        error_text(&e)
                    )
                })?;
                Ok(Box::new(con))
            }
        }
    }
}

impl std::fmt::Display for Target {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Target::Server(url) => f.write_str(url),
            Target::Cluster(nodes) => write!(f, "cluster {}", nodes.join(",")),
        }
    }
}

/// A Redis error on one line: its code and text, as the server sent them.
pub fn error_text(e: &redis::RedisError) -> String {
    let text = match (e.code(), e.detail()) {
        (Some(code), Some(detail)) => format!("{code} {detail}"),
        _ => e.to_string(),
    };
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// `EVALSHA` (or `EVALSHA_RO`) named a script the server has not cached:
/// a restart, or a failover to a replica (scripts loaded on a primary are
/// not replicated), emptied its script cache.
pub fn no_script(e: &redis::RedisError) -> bool {
    e.code() == Some("NOSCRIPT") || error_text(e).starts_with("NOSCRIPT")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cluster_is_its_seed_nodes_and_none_is_empty() {
        assert_eq!(
            Target::parse("redis://a:1", false),
            Ok(Target::Server("redis://a:1".into()))
        );
        // Without --cluster a comma is the URL's own.
        assert_eq!(
            Target::parse("redis://a:1,redis://b:2", false),
            Ok(Target::Server("redis://a:1,redis://b:2".into()))
        );
        assert_eq!(
            Target::parse("redis://a:1, redis://b:2", true),
            Ok(Target::Cluster(vec![
                "redis://a:1".into(),
                "redis://b:2".into()
            ]))
        );
        for bad in [
            "",
            "redis://a:1,",
            ",redis://a:1",
            "redis://a:1,,redis://b:2",
        ] {
            let error = Target::parse(bad, true).unwrap_err();
            assert!(error.contains("--cluster needs"), "{bad}: {error}");
        }
    }
}
