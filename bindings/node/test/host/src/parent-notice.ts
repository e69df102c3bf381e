// The host's parent-notice channel, as the fixture needs it: a line goes to
// the installed sink (the host queues them while its agent owns the
// terminal), or to stderr when none is installed.
export type ParentNoticeSink = (line: string) => void;

let sink: ParentNoticeSink | undefined;

export function emitParentNotice(message: string): void {
  const line = `${message}\n`;
  if (sink === undefined) process.stderr.write(line);
  else sink(line);
}

/** Installs `next`; the returned function puts the previous sink back. */
export function installParentNoticeSink(next: ParentNoticeSink): () => void {
  const previous = sink;
  sink = next;
  let restored = false;
  return () => {
    if (restored) return;
    restored = true;
    sink = previous;
  };
}
