// Stands for the host's own pacer module. The drop-in's steps replace this
// file; a run that skipped them fails to compile (nothing is exported).
export {};
throw new Error('the host pacer module was not swapped for the drop-in');
