'use strict';
// pacer for Node: the package's interface. The pacers of one process and of
// one machine live in pacer.js; the fleet's, over Redis, in redis.js (which
// builds on pacer.js). This file only gathers them, one name a line (each
// assignment is what Node's ESM import sees as a named export).

const local = require('./pacer.js');
const fleet = require('./redis.js');

exports.Pacer = local.Pacer;
exports.SharedPacer = local.SharedPacer;
exports.RedisPacer = fleet.RedisPacer;
exports.RedisTicket = fleet.RedisTicket;
exports.RedisBooking = fleet.RedisBooking;
exports.sharedClockMs = local.sharedClockMs;
exports.Ticket = local.Ticket;
exports.Booking = local.Booking;
exports.NoticeRegistry = local.NoticeRegistry;
exports.resolveBudget = local.resolveBudget;
exports.refusalResponse = local.refusalResponse;
exports.ENV_NAMES = local.ENV_NAMES;
exports.DEFAULT_MESSAGE_PREFIX = local.DEFAULT_MESSAGE_PREFIX;
exports.WAIT_BOUNDS_MS = local.WAIT_BOUNDS_MS;
exports.constants = local.constants;
