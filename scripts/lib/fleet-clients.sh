#!/usr/bin/env bash
# Sourced by scripts/test-fleet.sh and scripts/flake-hunt.sh: the clients
# the fleet's checks run, written once. `fleet_clients PACER GO_HAMMER`
# (the pacer binary and the Go fleet client tests/fleet/go, both built)
# sets three arrays of --client NAME=COMMAND, their placeholders left for
# the checks to fill:
#   hammer_clients   tests/fleet/check.py: the CLI through the module and
#                    the function, Node (module), Python (function), Go (script)
#   cluster_clients  tests/fleet/cluster_check.py: the same with --cluster,
#                    and the CLI through the script too
#   fault_clients    tests/fleet/fault.py and cluster_fault.py: Node, Python, Go
fleet_clients() {
  local pacer=$1 go=$2
  local config="--rate-per-min {rate} --burst {burst} --idle-timeout-ms {idle} --max-retries {retries}"
  local args="{url} {key} {calls} {every} {rate} {burst} {idle} {retries}"
  local faults="{url} {key} {until} {quiet_from} {quiet_to} {every} {timeout} {seed} {rate} {burst} {idle} {retries}"
  local hammer="$pacer hammer --redis {url} --key {key} --calls {calls} --every-ms {every} $config"
  local cluster="$pacer hammer --cluster --redis {url} --key {key} --calls {calls} --every-ms {every} $config"
  local bindings=(
    --client "node-module=node tests/fleet/hammer.mjs $args"
    --client "python-function=target/python-venv/bin/python tests/fleet/hammer.py $args"
    --client "go-script=$go $args"
  )
  hammer_clients=(
    --client "cli-module=$hammer --door module"
    --client "cli-function=$hammer --door function"
    "${bindings[@]}"
  )
  cluster_clients=(
    --client "cli-module=$cluster --door module"
    --client "cli-function=$cluster --door function"
    --client "cli-script=$cluster --door script"
    "${bindings[@]}"
  )
  fault_clients=(
    --client "node=node tests/fleet/fault.mjs $faults"
    --client "python=target/python-venv/bin/python tests/fleet/fault_client.py $faults"
    --client "go=$go fault $faults"
  )
}
