export interface User {
  id: string
  name: string
}

const USERS: Record<string, User> = {
  '1': { id: '1', name: 'Ada' },
  '2': { id: '2', name: 'Grace' },
}

export function getUser(id: string): User {
  const user = USERS[id]
  return { id: user.id, name: user.name }
}
