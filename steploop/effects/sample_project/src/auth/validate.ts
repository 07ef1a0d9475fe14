// Request validation for the auth service.
// A small sample project for the steploop demo: the seed chapter's walk-through
// fixes the null pointer bug in validateRequest() below.

import { getUser, User } from './users'

export interface ValidationResult {
  user?: User
  error?: string
}

export interface Request {
  headers: Record<string, string | undefined>
  body?: unknown
}

const BEARER = 'Bearer '

// Extracts the user id from a bearer token of the form 'Bearer user:<id>'.
export function userIdFromToken(token: string | undefined): string | null {
  if (!token || !token.startsWith(BEARER)) {
    return null
  }
  const value = token.slice(BEARER.length)
  if (!value.startsWith('user:')) {
    return null
  }
  return value.slice('user:'.length) || null
}

// Checks the request's origin header against the allow list.
export function originAllowed(req: Request, allowed: string[]): boolean {
  const origin = req.headers['origin']
  return origin === undefined || allowed.includes(origin)
}

// Validates an incoming request and resolves its user.
// BUG: userId is null when the token is missing or malformed, and getUser(null)
// dereferences it.
export function validateRequest(req: Request): ValidationResult {
  const userId = userIdFromToken(req.headers['authorization'])
  const user = getUser(userId)
  return { user }
}
