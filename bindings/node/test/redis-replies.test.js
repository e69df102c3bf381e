'use strict';
// The one classification of error replies every fleet client keeps
// (docs/fleet-clients.md, "Which replies are failures"): each case of
// tests/fleet/replies.json, read from the repository (the file may gain
// cases: this test reads it, never a copy), classified by RedisPacer's own
// rule. No server is needed.
const { test } = require('node:test');
const assert = require('node:assert/strict');
const fs = require('node:fs');
const path = require('node:path');
const { classifyReply } = require('../redis.js');

const REPLIES = path.join(__dirname, '..', '..', '..', 'tests', 'fleet', 'replies.json');
const CLASSES = ['outage', 'engine', 'pacer'];

test('every reply of tests/fleet/replies.json gets the class the file gives it', () => {
  const { cases } = JSON.parse(fs.readFileSync(REPLIES, 'utf8'));
  assert.ok(Array.isArray(cases), 'replies.json has no "cases" array');
  assert.ok(cases.length >= 20, `replies.json has ${cases.length} cases, fewer than 20`);
  const wrong = [];
  for (const { reply, class: expected } of cases) {
    assert.equal(typeof reply, 'string', `a case without a reply text: ${JSON.stringify(reply)}`);
    assert.ok(CLASSES.includes(expected), `a case with the class ${JSON.stringify(expected)}`);
    const got = classifyReply(reply);
    if (got !== expected) wrong.push(`${JSON.stringify(reply)}: ${got}, the file says ${expected}`);
  }
  assert.deepEqual(wrong, []);
});

test('the rule\'s edges, by hand from docs/fleet-clients.md', () => {
  for (const [reply, expected] of [
    ['READONLY', 'outage'], // the whole text is the code when it has no space
    ['ERR OOM', 'outage'],
    ['ERR BUSY Redis is busy', 'outage'],
    ['ERR BUSYKEY Target key name already exists.', 'pacer'],
    ['readonly You can\'t write', 'pacer'], // case-sensitive codes
    ['ERR', 'pacer'],
    ['NOSCRIPT', 'engine'],
    ['ERR unknown command \'pacer.info\', with args beginning with: \'k\' ', 'engine'],
    ['ERR unknown command \'Pacer.Reserve\', with args beginning with: ', 'engine'],
    ['ERR unknown command \'FCALL\', with args beginning with: ', 'pacer'],
    ['ERR Function not found', 'engine'],
    ['ERR function not found', 'pacer'],
    ['ERR pacer: READONLY is not an outage here', 'pacer'],
  ]) {
    assert.equal(classifyReply(reply), expected, JSON.stringify(reply));
  }
});
